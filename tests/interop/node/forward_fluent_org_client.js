// @fluent-org/logger FluentClient -> a Forward server. argv[2]: JSON settings. Prints "sent N" when all are (acked).
"use strict";
const fs = require("fs");
const { FluentClient, EventTime } = require("@fluent-org/logger");
const { forwardEvent } = require("./forward_events");

async function main() {
  const cfg = JSON.parse(process.argv[2]);
  const socket = { host: "127.0.0.1", port: cfg.port, disableReconnect: false, timeout: 10000 };
  if (cfg.ca) socket.tls = { ca: fs.readFileSync(cfg.ca), servername: "localhost" };
  const options = { eventMode: cfg.mode, socket, flushInterval: 10 };
  if (cfg.ack) options.ack = { ackTimeout: 10000 };
  if (cfg.sharedKey) {
    options.security = { clientHostname: "node-client", sharedKey: cfg.sharedKey,
                         username: cfg.username || "", password: cfg.password || "" };
  }
  const client = new FluentClient(null, options);
  const sends = [];
  for (let i = 0; i < cfg.count; i++) {
    const e = forwardEvent(i);
    sends.push(client.emit(cfg.tag, e.record, new EventTime(e.epoch, e.nano)));
  }
  await Promise.all(sends);
  await client.shutdown();
  console.log("sent " + cfg.count);
}

main().catch((err) => { console.error("error: " + (err && err.stack || err)); process.exit(1); });
