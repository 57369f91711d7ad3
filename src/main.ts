#!/usr/bin/env node
// Process entry: the only file that exits. Exit codes: 0 success, 2 bad config or usage, 1 runtime failure.
import { describeConfig } from './config/describe';
import { leaseWarnings } from './config/lease-warnings';
import { loadConfigFile } from './config/load';
import { ConfigError } from './errors';
import { parseCliArgs, USAGE, UsageError } from './cli/args';
import { createLogger } from './observability/logger';
import { runInspect, runPrune } from './cli/maintenance';
import { runMigrate } from './cli/migrate';
import { serve } from './cli/serve';

async function main(argv: readonly string[]): Promise<number> {
  const args = parseCliArgs(argv);
  if (args.help) {
    process.stdout.write(USAGE);
    return 0;
  }
  const config = loadConfigFile(args.configFile);
  if (args.command === 'check') {
    process.stdout.write(`${describeConfig(config)}\n`);
    for (const warning of leaseWarnings(config))
      process.stdout.write(`warning: ${warning.message}\n`);
    return 0;
  }
  const logger = createLogger({ fd: args.command === 'serve' ? 1 : 2 });
  if (args.command === 'migrate') return runMigrate(config, logger);
  if (args.command === 'prune') return runPrune(config, logger);
  if (args.command === 'inspect') return runInspect(config, args, logger);
  return serve(config, logger);
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
    process.stderr.write(
      `idempotency-proxy: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`,
    );
    process.exit(1);
  },
);
