// `npm run soak [-- --minutes N]`: mixed traffic with injected faults against two real proxy processes
// on one PostgreSQL, for a set time. Faults: slow, dropped and released (503) upstream answers, upstream
// timeouts, a PostgreSQL restart and a proxy kill -9 every cycle. At the end it prints requests,
// unique keys, upstream executions and duplicates (executions the contract does not allow), plus the
// recovery time after each PostgreSQL restart; it exits 1 if any duplicate was found.
//
// Not part of `npm test`: it runs for minutes. Built by `npm run soak` (tsconfig in this folder).
import { type ChildProcess, spawn } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { Pool } from 'pg';
import { findFreePort, startEmbeddedPostgres } from '../../src/embedded/embedded';

type Fate = 'ok' | 'released' | 'drop' | 'slow';
interface Execution {
  /** When the client sent the request behind this execution: a lower bound of its claim time. */
  sentAt: number;
  key: string;
  route: string;
  fate: Fate;
  startedAt: number;
  endedAt: number;
}

const ROOT = path.resolve(__dirname, '../../../..');
const BIN = path.join(ROOT, 'dist', 'main.js');
const LOCK_MS = 3_000;
const UPSTREAM_TIMEOUT_MS = 1_000;
// Bounds chain lower bounds (claim after send, release after the answer): slack is clock granularity.
const SLACK_MS = 5;

const { values } = parseArgs({
  options: {
    minutes: { type: 'string', default: '5' },
    workers: { type: 'string', default: '16' },
    cycle: { type: 'string', default: '60' },
  },
});
const durationMs = Number(values.minutes) * 60_000;
const workerCount = Number(values.workers);
const cycleMs = Number(values.cycle) * 1_000;

async function main(): Promise<number> {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'ip-soak-'));
  const database = process.env.DATABASE_URL
    ? undefined
    : await startEmbeddedPostgres({ dataDir: path.join(dataDir, 'pg') });
  const url = process.env.DATABASE_URL ?? database!.url;
  const executions: Execution[] = [];
  const upstream = await startFaultyUpstream(executions);
  const table = `soak_${Date.now().toString(36)}`;
  const configFile = path.join(dataDir, 'proxy.yaml');
  fs.writeFileSync(configFile, soakConfig(table, upstream));
  const proxies = [await startProxy(configFile, url), await startProxy(configFile, url)];

  const stats = {
    requests: 0,
    byStatus: new Map<number | string, number>(),
    keys: new Set<string>(),
  };
  const recoveries: number[] = [];
  const started = Date.now();
  let stopping = false;

  const worker = async (id: number): Promise<void> => {
    for (let n = 0; !stopping; n++) {
      const route = n % 3 === 0 ? 'retried' : n % 3 === 1 ? 'waited' : 'orders';
      const key = `w${id}-${n}`;
      const fate = pickFate();
      stats.keys.add(`${route}/${key}`);
      // A client that retries: 1–3 attempts, sometimes two at once on different instances.
      const attempts = 1 + Math.floor(Math.random() * 3);
      for (let a = 0; a < attempts && !stopping; a++) {
        const concurrent = Math.random() < 0.3 ? 2 : 1;
        await Promise.all(
          Array.from({ length: concurrent }, (_, c) => {
            const proxy = proxies[(id + a + c) % proxies.length]!;
            return send(proxy.url, route, key, fate).then((status) => {
              stats.requests++;
              stats.byStatus.set(status, (stats.byStatus.get(status) ?? 0) + 1);
            });
          }),
        );
      }
    }
  };
  const workers = Array.from({ length: workerCount }, (_, i) => worker(i));

  // Faults, once per cycle: restart PostgreSQL mid-cycle, kill -9 one proxy and start a new one.
  const probePool = new Pool({ connectionString: url, max: 1 });
  probePool.on('error', () => undefined);
  while (Date.now() - started < durationMs) {
    await sleep(Math.min(cycleMs / 2, durationMs - (Date.now() - started)));
    if (Date.now() - started >= durationMs) break;
    if (database) {
      const stoppedAt = Date.now();
      await database.stop();
      await sleep(2_000);
      await database.restart();
      recoveries.push(await timeToRecover(proxies[0]!.url, stoppedAt + 2_000));
      log(`PostgreSQL restarted; proxies answered again after ${recoveries.at(-1)} ms`);
    }
    await sleep(Math.min(cycleMs / 2, Math.max(0, durationMs - (Date.now() - started))));
    if (Date.now() - started >= durationMs) break;
    const victim = proxies.shift()!;
    victim.child.kill('SIGKILL');
    proxies.push(await startProxy(configFile, url));
    log('a proxy was killed with -9 and replaced');
  }
  stopping = true;
  await Promise.all(workers);
  await sleep(UPSTREAM_TIMEOUT_MS * 2); // let slow executions finish before judging
  for (const proxy of proxies) proxy.child.kill('SIGTERM');
  await probePool.end();

  const duplicates = findDuplicates(executions);
  const report = {
    minutes: Number(values.minutes),
    requests: stats.requests,
    uniqueKeys: stats.keys.size,
    upstreamExecutions: executions.length,
    executedKeys: new Set(executions.map((e) => `${e.route}/${e.key}`)).size,
    duplicates: duplicates.length,
    responses: Object.fromEntries([...stats.byStatus.entries()].sort()),
    postgresRestarts: recoveries.length,
    recoveryMs: recoveries,
  };
  process.stdout.write(`${JSON.stringify(report, null, 2)}\n`);
  for (const duplicate of duplicates.slice(0, 5))
    process.stdout.write(`DUPLICATE ${JSON.stringify(duplicate)}\n`);
  upstream.server.close();
  await database?.stop();
  fs.rmSync(dataDir, { recursive: true, force: true });
  return duplicates.length === 0 ? 0 : 1;
}

function soakConfig(table: string, upstream: { url: string }): string {
  return `
listen:
  host: 127.0.0.1
  port: \${PROXY_PORT}
admin:
  port: \${ADMIN_PORT}
shutdownGrace: 5s
store:
  table: ${table}
  poolSize: 8
upstreams:
  api: { url: ${upstream.url}, timeout: ${UPSTREAM_TIMEOUT_MS}ms }
defaults:
  lockTimeout: ${LOCK_MS}ms
routes:
  - { name: orders, match: { path: /orders }, upstream: api, idempotency: {} }
  - { name: retried, match: { path: /retried }, upstream: api, idempotency: { unknownOutcome: retry } }
  - { name: waited, match: { path: /waited }, upstream: api, idempotency: { onConcurrent: wait, waitTimeout: 2s } }
`;
}

function pickFate(): Fate {
  const roll = Math.random();
  if (roll < 0.03) return 'drop';
  if (roll < 0.06) return 'released';
  if (roll < 0.08) return 'slow';
  return 'ok';
}

/** An upstream that records every execution and fails the way it is told to. */
async function startFaultyUpstream(
  executions: Execution[],
): Promise<{ url: string; server: http.Server }> {
  const server = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      const fate = (req.headers['x-fate'] as Fate | undefined) ?? 'ok';
      const execution: Execution = {
        sentAt: Number(req.headers['x-sent-at']),
        key: String(req.headers['idempotency-key']),
        route: (req.url ?? '').slice(1),
        fate,
        startedAt: Date.now(),
        endedAt: Number.POSITIVE_INFINITY,
      };
      executions.push(execution);
      const delay = fate === 'slow' ? UPSTREAM_TIMEOUT_MS * 1.5 : Math.random() * 30;
      setTimeout(() => {
        execution.endedAt = Date.now();
        if (fate === 'drop') return void req.socket.destroy();
        res.writeHead(fate === 'released' ? 503 : 201, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ key: execution.key }));
      }, delay);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, server };
}

/**
 * Executions of one key the contract allows: after a release, after the lease under `retry`, or after
 * the record expired (ttl is the default 24h here, so never). Anything else is a duplicate.
 */
function findDuplicates(executions: Execution[]): { key: string; runs: Execution[] }[] {
  const byKey = new Map<string, Execution[]>();
  for (const e of executions) {
    const id = `${e.route}/${e.key}`;
    byKey.set(id, [...(byKey.get(id) ?? []), e]);
  }
  const duplicates: { key: string; runs: Execution[] }[] = [];
  for (const [key, runs] of byKey) {
    runs.sort((a, b) => a.startedAt - b.startedAt);
    for (let i = 1; i < runs.length; i++) {
      const prev = runs[i - 1]!;
      const next = runs[i]!;
      const released = prev.fate === 'released' && next.startedAt >= prev.endedAt - SLACK_MS;
      const takenOver =
        prev.route === 'retried' && next.startedAt >= prev.sentAt + LOCK_MS - SLACK_MS;
      if (!released && !takenOver) duplicates.push({ key, runs });
    }
  }
  return duplicates;
}

async function send(
  base: string,
  route: string,
  key: string,
  fate: Fate,
): Promise<number | string> {
  try {
    const res = await fetch(`${base}/${route}`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        'idempotency-key': key,
        'x-fate': fate,
        'x-sent-at': String(Date.now()),
      },
      body: JSON.stringify({ key }),
      signal: AbortSignal.timeout(10_000),
    });
    await res.arrayBuffer();
    return res.status;
  } catch {
    return 'network-error';
  }
}

async function timeToRecover(base: string, since: number): Promise<number> {
  for (;;) {
    const status = await send(base, 'orders', `probe-${Date.now()}-${Math.random()}`, 'ok');
    if (status === 201) return Date.now() - since;
    await sleep(20);
  }
}

interface RunningProxy {
  child: ChildProcess;
  url: string;
}

async function startProxy(configFile: string, databaseUrl: string): Promise<RunningProxy> {
  const port = await findFreePort();
  const adminPort = await findFreePort();
  const child = spawn(process.execPath, [BIN, 'serve', '--config', configFile], {
    env: {
      ...process.env,
      DATABASE_URL: databaseUrl,
      PROXY_PORT: String(port),
      ADMIN_PORT: String(adminPort),
      LOG_LEVEL: 'warn',
    },
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  const url = `http://127.0.0.1:${port}`;
  for (let i = 0; i < 200; i++) {
    try {
      await fetch(`${url}/nowhere`);
      return { child, url };
    } catch {
      await sleep(50);
    }
  }
  throw new Error('a proxy did not start');
}

function log(line: string): void {
  process.stderr.write(`[soak ${new Date().toISOString()}] ${line}\n`);
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

main().then(
  (code) => process.exit(code),
  (error: unknown) => {
    process.stderr.write(`soak failed: ${String(error)}\n`);
    process.exit(1);
  },
);
