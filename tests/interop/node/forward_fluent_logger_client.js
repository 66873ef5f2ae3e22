// npm fluent-logger (v3) sender -> a Forward server. argv[2]: JSON settings. Prints "sent N" when all are (acked).
"use strict";
const logger = require("fluent-logger");
const { forwardEvent } = require("./forward_events");

const cfg = JSON.parse(process.argv[2]);
const options = { host: "127.0.0.1", port: cfg.port, eventMode: cfg.mode, timeout: 10.0, flushInterval: 20,
                  reconnectInterval: 500, requireAckResponse: !!cfg.ack, ackResponseTimeout: 10000,
                  internalLogger: { info() {}, error: console.error } };
if (cfg.sharedKey) {
  options.security = { clientHostname: "node-fluent-logger", sharedKey: cfg.sharedKey,
                       username: cfg.username || "", password: cfg.password || "" };
}
const sender = logger.createFluentSender(null, options);
let done = 0;
let failed = false;
sender.on("error", (err) => { failed = true; console.error("error: " + err); process.exit(1); });
for (let i = 0; i < cfg.count; i++) {
  const e = forwardEvent(i);
  sender.emit(cfg.tag, e.record, new logger.EventTime(e.epoch, e.nano), (err) => {
    if (err) { console.error("error: " + err); process.exit(1); }
    done += 1;
    if (done === cfg.count && !failed) {
      console.log("sent " + done);
      sender.end();
      setTimeout(() => process.exit(0), 50);
    }
  });
}
