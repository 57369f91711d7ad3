#!/usr/bin/env node
// `npm run test:citus`: the tests that prove the store on a Citus cluster, run with the cluster as
// the suite's database (DATABASE_URL=CITUS_URL). CITUS_URL names a coordinator with two active
// workers (docs/store-topologies.md, "On Citus"). Without it nothing runs, and it says so in one
// line. Extra arguments go to jest (`npm run test:citus -- -t storm`).
//
// The whole suite also runs on Citus (`DATABASE_URL=$CITUS_URL CITUS_URL=$CITUS_URL npm test`); these
// are the files that reach every statement of the store there, in the time CI has for them.
'use strict';
require('../src/launch/node-version.js').requireSupportedNode();
const { spawnSync } = require('node:child_process');
const path = require('node:path');

const FILES = [
  // migrate, claims and completions alone and batched per shard, takeover, settle, release, the
  // coordinator's NOTIFY, admin reads and clears, prune, a 200-way storm over two instances, and
  // storms that cut the sessions on the workers and on the coordinator.
  'test/integration/citus.test.ts',
  // The same store contract as every other store, and what a lost reply leaves behind.
  'test/integration/key-store-contract.test.ts',
  'test/integration/store-lost-replies.test.ts',
  'test/integration/batched-store.test.ts',
  // An instance cut off past the lease: its queued answer replaces another's unknown outcome.
  'test/integration/answers-outlive-outages.test.ts',
  // Reconcile: the probe token, the sweep's pick (two instances sweeping at once), give-up, a queued
  // unknown outcome, and the MCP probe.
  'test/integration/reconcile.test.ts',
  'test/integration/reconcile-give-up.test.ts',
  'test/integration/reconcile-queued.test.ts',
  'test/integration/mcp-reconcile.test.ts',
  // Streams: attach on one instance and from a second, and the partial answer of a stream that
  // broke off.
  'test/integration/streamed-answers.test.ts',
  'test/integration/stream-partial.test.ts',
  // Several instances, the admin API and console reads, the pruner, workers.
  'test/integration/multi-instance.test.ts',
  // Long calls: a handle opened, polled from another instance, and settled after a kill -9; MCP
  // tasks joined, cancelled and resumed across instances.
  'test/integration/respond-async.test.ts',
  'test/integration/mcp-tasks.test.ts',
  'test/integration/concurrency.test.ts',
  'test/integration/admin-api.test.ts',
  'test/integration/pruner.test.ts',
  'test/integration/workers.test.ts',
  'test/integration/migrate.test.ts',
  // The anyonce core vectors, through one instance and through two behind a balancer.
  'test/conformance/anyonce-core.test.ts',
];

const citusUrl = process.env.CITUS_URL;
if (!citusUrl) {
  process.stderr.write(
    'SKIPPED Citus suite: CITUS_URL is not set (a coordinator with two active workers; see docs/store-topologies.md, "On Citus")\n',
  );
  process.exit(0);
}
const root = path.resolve(__dirname, '..');
const jest = path.join(root, 'node_modules', 'jest', 'bin', 'jest.js');
const run = spawnSync(
  process.execPath,
  // Two files at once, not the suite's three: the cluster's three PostgreSQL servers share the
  // machine's cores with the proxies, and the storms cut its connections on a schedule.
  [jest, '--maxWorkers=2', '--runTestsByPath', ...FILES, ...process.argv.slice(2)],
  { cwd: root, stdio: 'inherit', env: { ...process.env, DATABASE_URL: citusUrl } },
);
process.exit(run.status ?? 1);
