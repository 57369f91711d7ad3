// One process per spool directory: a second open, in this process or another, is refused with the
// holder's pid while the holder lives (even stopped); a holder killed with -9 blocks nobody, even
// when the next process has the dead one's pid; a socket still binding is never taken for a dead
// holder's; a path too long for a unix socket still locks; of processes opening at once, at most one
// holds.
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { Spool, SpoolRefused } from '../../src/store/spool';
import { startProcess, tempFolder, type TestProcess } from '../support/spool';

const OPTIONS = { maxBytes: 1 << 20 };

/** Another process that opens the spool in `dir` and says `held` or `refused <code>: <message>`. */
function opener(dir: string): TestProcess {
  return startProcess(
    `const { Spool } = require(process.env.BUILT_SPOOL);
     Spool.open(process.env.SPOOL_DIR, { maxBytes: 1 << 20 }).then(
       (opened) => {
         globalThis.held = opened.spool; // an unreferenced FileHandle is closed by GC, fatally
         console.log('held');
       },
       (error) => {
         console.log('refused ' + error.code + ': ' + error.message);
         process.exit(3);
       },
     );
     setInterval(() => {}, 1 << 30);`,
    { SPOOL_DIR: dir },
  );
}

const opened: Spool[] = [];
afterEach(() => Promise.all(opened.splice(0).map((spool) => spool.close())));

async function open(dir: string): Promise<Spool> {
  const { spool } = await Spool.open(dir, OPTIONS);
  opened.push(spool);
  return spool;
}

function sockets(dir: string): string[] {
  return fs.readdirSync(dir).filter((name) => name.endsWith('.sock'));
}

test('a second open in this process is refused at once, until the first closes', async () => {
  const dir = tempFolder();
  const first = await open(dir);
  // Known here, so no socket and no rounds of stepping back.
  const listen = jest.spyOn(net.Server.prototype, 'listen');
  const again = Spool.open(dir, OPTIONS);
  await expect(again).rejects.toBeInstanceOf(SpoolRefused);
  await expect(again).rejects.toThrow(
    `the spool directory ${dir} is already open in this process (pid ${process.pid}); open it once`,
  );
  expect(listen).not.toHaveBeenCalled();
  listen.mockRestore();
  await first.close();
  await open(dir);
});

test('of opens at once in this process, exactly one holds (no tie where all step back)', async () => {
  const dir = tempFolder();
  const results = await Promise.allSettled(
    Array.from({ length: 8 }, () => Spool.open(dir, OPTIONS)),
  );
  for (const result of results) if (result.status === 'fulfilled') opened.push(result.value.spool);
  expect(results.filter((result) => result.status === 'fulfilled')).toHaveLength(1);
});

test('a live holder in another process refuses the open, naming its pid; killed with -9 it blocks nobody', async () => {
  const dir = tempFolder();
  const holder = opener(dir);
  await holder.line(/^held$/);
  const refused = Spool.open(dir, OPTIONS);
  await expect(refused).rejects.toBeInstanceOf(SpoolRefused);
  await expect(refused).rejects.toThrow(
    `the spool directory ${dir} is in use by another proxy process (pid ${holder.pid}); give ` +
      `each process its own spool directory (store.outbox.spool)`,
  );
  holder.child.kill('SIGSTOP'); // stopped is still alive
  await expect(Spool.open(dir, OPTIONS)).rejects.toThrow(`(pid ${holder.pid})`);
  await holder.killHard();
  expect(sockets(dir)).toEqual([expect.stringMatching(`^holder-${holder.pid}-`)]);
  await open(dir);
  expect(sockets(dir)).toEqual([expect.stringMatching(`^holder-${process.pid}-`)]);
});

test('another process is refused while this one holds the directory', async () => {
  const dir = tempFolder();
  await open(dir);
  const other = opener(dir);
  expect(await other.line(/^refused /)).toBe(
    `refused SPOOL_REFUSED: the spool directory ${dir} is in use by another proxy process ` +
      `(pid ${process.pid}); give each process its own spool directory (store.outbox.spool)`,
  );
});

test("a dead holder's socket blocks nobody, even one named with this process's pid or pid 1", async () => {
  // As in a container, where the process that died and the one starting are both pid 1.
  const dir = tempFolder();
  const names = [`holder-${process.pid}-0123456789ab.sock`, 'holder-1-ba9876543210.sock'];
  const dead = startProcess(
    `const net = require('node:net');
     let listening = 0;
     for (const file of JSON.parse(process.env.SOCKETS))
       net.createServer().listen(file, () => ++listening === 2 && console.log('listening'));`,
    { SOCKETS: JSON.stringify(names.map((name) => path.join(dir, name))) },
  );
  await dead.line(/^listening$/);
  await dead.killHard();
  expect(sockets(dir).sort()).toEqual([...names].sort());
  await open(dir);
  expect(sockets(dir)).toEqual([expect.stringMatching(`^holder-${process.pid}-(?!0123456789ab)`)]);
});

test("a binder socket (bound, not yet a holder's) is never taken for a holder; a leftover one is removed", async () => {
  // A process killed between its bind and its rename leaves binder-…; one still binding is young.
  const dir = tempFolder();
  const leftover = path.join(dir, 'binder-4242-0123456789ab.sock');
  const young = path.join(dir, 'binder-4343-ba9876543210.sock');
  for (const file of [leftover, young]) fs.writeFileSync(file, '');
  const anHourAgo = new Date(Date.now() - 3_600_000);
  fs.utimesSync(leftover, anHourAgo, anHourAgo);
  await open(dir);
  expect(fs.existsSync(leftover)).toBe(false);
  expect(fs.existsSync(young)).toBe(true);
  const holders = sockets(dir).filter((name) => name.startsWith('holder-'));
  expect(holders).toEqual([expect.stringMatching(`^holder-${process.pid}-`)]);
});

test('a directory whose path is too long for a unix socket is locked all the same', async () => {
  let dir = tempFolder();
  while (Buffer.byteLength(dir) < 150) dir = path.join(dir, 'a-folder-with-a-long-name');
  await open(dir);
  expect(sockets(dir)).toHaveLength(1);
  await expect(Spool.open(dir, OPTIONS)).rejects.toBeInstanceOf(SpoolRefused);
  const other = opener(dir);
  expect(await other.line(/^refused /)).toContain(`(pid ${process.pid})`);
});

test('of processes opening one directory at once, at most one holds it', async () => {
  const dir = tempFolder();
  const openers = Array.from({ length: 4 }, () => opener(dir));
  const outcomes = await Promise.all(openers.map((process) => process.line(/^(held|refused )/)));
  expect(outcomes.filter((line) => line === 'held').length).toBeLessThanOrEqual(1);
  for (const refused of outcomes.filter((line) => line !== 'held'))
    expect(refused).toMatch(/^refused SPOOL_REFUSED: .* is in use by another proxy process/);
  await Promise.all(openers.map((process) => process.killHard()));
});
