// Scale with data (--rows N): the new-key scenario again on a table that already holds N live
// records, and once more while `idempotency-proxy prune` deletes a backlog of N expired ones.
// Rows are inserted by the bench's own connection in chunks, shaped like real records (a 32-byte
// fingerprint, stored headers and a ~100-byte body), then vacuumed and analysed.
import { execFile } from 'node:child_process';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { say, stack } from './stack';
import type { StoreProbe } from './store-probe';

const CHUNK_ROWS = 250_000;

/** Inserts `rows` completed records expiring in a day (live) or a minute ago (expired). */
export async function seedRows(kind: 'live' | 'expired', rows: number): Promise<number> {
  const probe = stack.probe as StoreProbe;
  const table = stack.table as string;
  const started = performance.now();
  const prefix = `${kind}-${Date.now().toString(36)}-`; // each call's keys are new (--runs seeds again)
  for (let from = 1; from <= rows; from += CHUNK_ROWS) {
    const to = Math.min(rows, from + CHUNK_ROWS - 1);
    await probe.execute(
      `INSERT INTO "${table}" (scope, tenant, key, route, fingerprint, state, claim_token, fence,
         status, headers, body, completed_at, expires_at, prune_after)
       SELECT 'refunds', '', '${prefix}' || i, 'refunds',
              decode(md5(i::text) || md5('${kind}' || i::text), 'hex'), 'completed', gen_random_uuid(), 1,
              201, '[["content-type","application/json"]]'::jsonb,
              convert_to('{"refund":"re_' || i || '","status":"succeeded","amount":4999,"currency":"EUR"}', 'UTF8'),
              now(), now() + ${kind === 'live' ? "interval '1 day'" : "interval '-1 minute'"},
              now() + ${kind === 'live' ? "interval '1 day'" : "interval '-1 minute'"}
       FROM generate_series(${from}, ${to}) AS i`,
    );
    say(`seeded ${to.toLocaleString('en')} of ${rows.toLocaleString('en')} ${kind} rows…`);
  }
  await probe.execute(`VACUUM ANALYZE "${table}"`);
  return (performance.now() - started) / 1000;
}

export interface PruneRun {
  /** Resolves when the prune command has exited, with what it printed. */
  readonly done: Promise<{ deleted: number; batches: number; seconds: number }>;
}

/** Starts `idempotency-proxy prune` (a separate process, like an operator's) on the bench's config. */
export function startPrune(configFile: string): PruneRun {
  const started = performance.now();
  const done = new Promise<{ deleted: number; batches: number; seconds: number }>(
    (resolve, reject) => {
      execFile(
        process.execPath,
        [path.join(stack.build.distDir, 'main.js'), 'prune', '--config', configFile],
        {
          cwd: stack.build.root,
          env: { ...process.env, LOG_LEVEL: 'warn', LOG_FORMAT: 'json' },
          maxBuffer: 1 << 20,
        },
        (error, stdout, stderr) => {
          if (error) return reject(new Error(`prune failed: ${stderr || error.message}`));
          const result = JSON.parse(stdout.trim().split('\n').pop() ?? '{}') as {
            deleted: number;
            batches: number;
          };
          resolve({ ...result, seconds: (performance.now() - started) / 1000 });
        },
      );
    },
  );
  done.catch(() => undefined); // awaited by the scenario; never left unhandled meanwhile
  return { done };
}
