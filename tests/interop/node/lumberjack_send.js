// Send COUNT events with the npm lumberjack-protocol client (v1 'D' frames over TLS)
// and exit 0 once the server has acknowledged them all.
// usage: node lumberjack_send.js HOST PORT CA_FILE COUNT [WINDOW_SIZE]
'use strict';
const fs = require('fs');
const lumberjack = require('lumberjack-protocol');

const [host, port, caFile, countArg, windowArg] = process.argv.slice(2);
const count = parseInt(countArg, 10);
const windowSize = parseInt(windowArg || '1000', 10);

const client = lumberjack.client(
  { host, port: parseInt(port, 10), ca: [fs.readFileSync(caFile, 'utf-8')] },
  { maxQueueSize: count + 10, windowSize, reconnect: 200 },
);
const timer = setTimeout(() => { console.error('timed out waiting for acks'); process.exit(2); }, 20000);

client.on('connect', () => {
  client._socket.on('ack', (seq) => {
    if (seq >= count) {
      console.log(JSON.stringify({ acked: seq }));
      clearTimeout(timer);
      client.close();
      process.exit(0);
    }
  });
});
client.on('disconnect', (err) => { if (err) console.error('disconnect: ' + err); });
for (let i = 1; i <= count; i++) {
  client.writeDataFrame({ line: 'node line ' + i, seq_no: i, file: '/var/log/node.log' });
}
