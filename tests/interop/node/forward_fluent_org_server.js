// @fluent-org/logger FluentServer: prints "listening PORT", then one JSON line per event received
// ({tag, epoch, nano, record}); with {"quiet": true} only a final count on stdin EOF / SIGTERM.
"use strict";
const { FluentServer } = require("@fluent-org/logger");

class RecordingServer extends FluentServer {
  constructor(options, quiet) {
    super(options);
    this.quiet = quiet;
    this.count = 0;
  }
  onEntry(tag, time, record) {
    this.count += 1;
    if (this.quiet) return;
    const epoch = typeof time === "number" ? time : time.epoch;
    const nano = typeof time === "number" ? 0 : time.nano;
    process.stdout.write(JSON.stringify({ tag, epoch, nano, record }) + "\n");
  }
}

async function main() {
  const cfg = JSON.parse(process.argv[2] || "{}");
  const options = { listenOptions: { host: "127.0.0.1", port: cfg.port || 0 }, keepalive: true };
  if (cfg.sharedKey) {
    options.security = { serverHostname: "node-server", sharedKey: cfg.sharedKey,
                         authorize: !!cfg.users, userDict: cfg.users || {} };
  }
  const server = new RecordingServer(options, !!cfg.quiet);
  await server.listen();
  process.stdout.write("listening " + server.port + "\n");
  const stop = async () => {
    process.stdout.write("count " + server.count + "\n");
    await server.close();
    process.exit(0);
  };
  process.on("SIGTERM", stop);
  process.stdin.on("end", stop);
  process.stdin.resume();
}

main().catch((err) => { console.error("error: " + (err && err.stack || err)); process.exit(1); });
