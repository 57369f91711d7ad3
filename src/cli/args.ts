// Command-line parsing shared by every command: `idempotency-proxy [command] [args] [--config FILE]`.
import { parseArgs } from 'node:util';

export const COMMANDS = ['serve', 'check', 'migrate', 'prune', 'inspect'] as const;
export type Command = (typeof COMMANDS)[number];

export interface CliArgs {
  readonly command: Command;
  readonly configFile: string;
  readonly help: boolean;
  readonly version: boolean;
  /** inspect: the key, and optionally the route (or group) and raw tenant values. */
  readonly key: string | undefined;
  readonly route: string | undefined;
  readonly tenant: readonly string[];
  readonly body: boolean;
}

export const DEFAULT_CONFIG_FILE = 'config/proxy.yaml';

export const USAGE = `Usage: idempotency-proxy [command] [--config FILE]

Commands:
  serve     run the proxy (default)
  check     validate the config and print the resolved routes (exit 2 on errors)
  migrate   apply the store's schema migrations and exit
  prune     delete expired records now and exit
  inspect KEY [--route R] [--tenant T]... [--body]
            print the record(s) stored for KEY: state, attempts, replays, times, status, history

Options:
  -c, --config FILE   config file (default: $IDEMPOTENCY_PROXY_CONFIG or ${DEFAULT_CONFIG_FILE})
  -r, --route R       inspect: the route (or idempotency.group) the key belongs to
  -t, --tenant T      inspect: the raw tenant value, once per tenant part of the route, in order
  -b, --body          inspect: include the stored body
  -h, --help          show this help
  -v, --version       print the version

Environment: DATABASE_URL (else the embedded PostgreSQL), LOG_LEVEL (info), LOG_FORMAT (json|pretty),
  IDEMPOTENCY_PROXY_CONFIG, IDEMPOTENCY_PROXY_DB_WAIT (seconds to wait for the database, 30)
`;

export class UsageError extends Error {}

export function parseCliArgs(
  argv: readonly string[],
  env: NodeJS.ProcessEnv = process.env,
): CliArgs {
  let parsed;
  try {
    parsed = parseArgs({
      args: [...argv],
      allowPositionals: true,
      options: {
        config: { type: 'string', short: 'c' },
        route: { type: 'string', short: 'r' },
        tenant: { type: 'string', short: 't', multiple: true },
        body: { type: 'boolean', short: 'b' },
        help: { type: 'boolean', short: 'h' },
        version: { type: 'boolean', short: 'v' },
      },
    });
  } catch (error) {
    throw new UsageError((error as Error).message);
  }
  const [command = 'serve', ...rest] = parsed.positionals;
  if (!(COMMANDS as readonly string[]).includes(command)) {
    throw new UsageError(`unknown command "${command}"; expected one of: ${COMMANDS.join(', ')}`);
  }
  const help = parsed.values.help === true || parsed.values.version === true;
  const takesKey = command === 'inspect';
  if (takesKey && rest.length === 0 && !help) throw new UsageError('inspect needs a KEY');
  const extra = takesKey ? rest.slice(1) : rest;
  if (extra.length > 0) throw new UsageError(`unexpected argument "${extra[0]}"`);
  if (!takesKey && (parsed.values.route || parsed.values.tenant || parsed.values.body)) {
    throw new UsageError('--route, --tenant and --body go with inspect');
  }
  return {
    command: command as Command,
    configFile: parsed.values.config ?? env.IDEMPOTENCY_PROXY_CONFIG ?? DEFAULT_CONFIG_FILE,
    help: parsed.values.help === true,
    version: parsed.values.version === true,
    key: takesKey ? rest[0] : undefined,
    route: parsed.values.route,
    tenant: parsed.values.tenant ?? [],
    body: parsed.values.body === true,
  };
}
