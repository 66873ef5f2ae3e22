// @fluent-org/logger FluentClient (PackedForward, requireAckResponse) sending continuously to a hub that
// is being killed. argv[2]: JSON {port, tag, inflight, ackTimeout}. Every event carries {seq}; an event
// whose chunk was not acked in time (or failed) is emitted again (the library gives it a new chunk id).
// stdout: "A <seq> <attempt>" once an event's chunk is acknowledged; "DONE <acked> <retries>" at the end.
// A line on stdin (or its close) stops new events; the script then waits until every event is acked.
"use strict";
const { FluentClient, EventTime } = require("@fluent-org/logger");

const cfg = JSON.parse(process.argv[2]);
const client = new FluentClient(null, {
  eventMode: "PackedForward",
  socket: {
    host: "127.0.0.1", port: cfg.port, timeout: 2000, disableReconnect: false,
    reconnect: { delay: 20, backoff: 1.5, minDelay: 20, maxDelay: 300 },
  },
  ack: { ackTimeout: cfg.ackTimeout },
  flushInterval: 5,
});

let stopping = false;
let next = 0;
let inflight = 0;
let acked = 0;
let retries = 0;
const out = [];

function flushOut() {
  if (out.length) {
    process.stdout.write(out.join(""));
    out.length = 0;
  }
}
setInterval(flushOut, 50).unref();

function send(seq, attempt) {
  const now = Date.now();
  const time = new EventTime(Math.floor(now / 1000), (now % 1000) * 1e6);
  client.emit(cfg.tag, { seq: seq, attempt: attempt, pad: "x".repeat(40) }, time).then(
    () => {
      out.push(`A ${seq} ${attempt}\n`);
      acked++;
      inflight--;
      pump();
    },
    () => {
      retries++;
      setTimeout(() => send(seq, attempt + 1), 20);
    },
  );
}

function pump() {
  while (!stopping && inflight < cfg.inflight) {
    inflight++;
    send(next++, 0);
  }
  if (stopping && inflight === 0) {
    flushOut();
    process.stdout.write(`DONE ${acked} ${retries}\n`);
    client.shutdown().finally(() => process.exit(0));
  }
}

process.stdin.on("data", () => { stopping = true; pump(); });
process.stdin.on("end", () => { stopping = true; pump(); });
pump();
