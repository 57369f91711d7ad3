// A disposable PostgreSQL in a child process, for tests that stop and restart the database. It runs
// the built proxy's own embedded server (dist/embedded/embedded.js, built by the jest global setup), so it
// needs no root handling of its own and changes no directory's permissions.
// Protocol over IPC: {cmd:'start'} → {ok:true, url}; {cmd:'stop'} → {ok:true}.
'use strict';
const path = require('node:path');
const { startEmbeddedPostgres } = require(path.join(__dirname, '../../dist/embedded/embedded.js'));

const dataDir = process.env.PG_DATA_DIR;
const port = Number(process.env.PG_PORT);
/** @type {{url: string, stop(): Promise<void>, restart(): Promise<void>} | undefined} */
let server;
let running = false;

process.on('message', async (message) => {
  try {
    if (message.cmd === 'start') {
      // Not detached: a Ctrl-C of the test run stops this throwaway server too.
      if (server) await server.restart();
      else server = await startEmbeddedPostgres({ dataDir, port, detached: false });
      running = true;
      process.send({ ok: true, url: server.url });
    } else if (message.cmd === 'stop') {
      if (server && running) await server.stop();
      running = false;
      process.send({ ok: true });
    }
  } catch (error) {
    process.send({ ok: false, error: String(error && error.stack ? error.stack : error) });
  }
});
process.on('disconnect', () => {
  const stopping = server && running ? server.stop() : Promise.resolve();
  stopping.finally(() => process.exit(0));
});
