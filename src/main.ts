#!/usr/bin/env node
// Process entry: runs the command and turns its result or error into the exit code: 0 success, 2 bad
// config or usage, 1 runtime failure. `serve` also exits on its own for a signal during startup and
// for a second signal while it drains (cli/serve.ts).
import cluster from 'node:cluster';
import fs from 'node:fs';
import path from 'node:path';
import { describeConfig } from './compiler/describe';
import { configWarnings } from './compiler/warnings';
import { loadConfigFile } from './compiler/load';
import { ConfigError } from './errors';
import { parseCliArgs, USAGE, UsageError } from './cli/args';
import { checkLogSettings, createLogger } from './observability/logger';
import { StartupError } from './startup-error';
import { runClear, runInspect, runPrune, runReconcile } from './cli/maintenance';
import { runMigrate } from './cli/migrate';
import { serve } from './cli/serve';
import { servePrimary } from './cluster/primary';
import { serveWorker } from './cluster/worker';
import { describeStoreTopology } from './cli/check-store';
import { restartWithServingHeap } from './heap-tuning';
import { embeddedDataDir } from './embedded/data-dir-placement';
import { runClean } from './cli/clean';

async function main(argv: readonly string[]): Promise<number> {
  const args = parseCliArgs(argv);
  if (args.version) {
    process.stdout.write(`idempotency-proxy ${version()}\n`);
    return 0;
  }
  if (args.help) {
    process.stdout.write(USAGE);
    return 0;
  }
  checkLogSettings();
  if (cluster.isWorker) {
    // A cluster worker (`workers` > 1): the primary hands it the config it checked (cluster/), and
    // its node flags are the primary's, serving flags included (heap-tuning.ts).
    return serveWorker(createLogger({ base: { worker: cluster.worker!.id, pid: process.pid } }));
  }
  const config = loadConfigFile(args.configFile);
  if (args.command === 'check') {
    const embedded =
      config.store.url === undefined ? embeddedDataDir(config.store.dataDir) : undefined;
    process.stdout.write(`${describeConfig(config, embedded)}\n`);
    for (const warning of configWarnings(config))
      process.stdout.write(`warning: ${warning.message}\n`);
    const store = await describeStoreTopology(config);
    process.stdout.write(`${store.line}\n`);
    return store.tlsRefused ? 2 : 0;
  }
  if (args.command === 'serve') restartWithServingHeap();
  const logger = createLogger({ fd: args.command === 'serve' ? 1 : 2 });
  if (args.command === 'migrate') return runMigrate(config, logger);
  if (args.command === 'prune') return runPrune(config, logger);
  if (args.command === 'reconcile') return runReconcile(config, args, logger);
  if (args.command === 'inspect') return runInspect(config, args, logger);
  if (args.command === 'clear') return runClear(config, args, logger);
  if (args.command === 'clean') return runClean(config, args);
  return config.workers > 1 ? servePrimary(config, logger) : serve(config, logger);
}

/** From package.json, one folder above dist/ (and src/). */
function version(): string {
  const file = path.join(__dirname, '..', 'package.json');
  return (JSON.parse(fs.readFileSync(file, 'utf8')) as { version: string }).version;
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (error: unknown) => {
    if (error instanceof UsageError) {
      process.stderr.write(`idempotency-proxy: ${error.message}\n\n${USAGE}`);
      process.exit(2);
    }
    if (error instanceof ConfigError) {
      process.stderr.write(
        `idempotency-proxy: invalid configuration (${error.issues.length} problem${error.issues.length === 1 ? '' : 's'}):\n${error.message}\n`,
      );
      process.exit(2);
    }
    if (error instanceof StartupError) {
      // Already says what happened and what to do: one line, no stack.
      process.stderr.write(`idempotency-proxy: ${error.message}\n`);
      process.exit(error.exitCode);
    }
    // Anything else is a bug or something we did not foresee: the stack helps whoever reports it.
    process.stderr.write(
      `idempotency-proxy: ${error instanceof Error ? (error.stack ?? error.message) : `failed: ${String(error)}`}\n`,
    );
    process.exit(1);
  },
);
