// Command-line parsing shared by every command: `idempotency-proxy [command] [args] [--config FILE]`.
import { parseArgs } from 'node:util';

export const COMMANDS = [
  'serve',
  'check',
  'migrate',
  'prune',
  'reconcile',
  'inspect',
  'clear',
  'clean',
] as const;
export type Command = (typeof COMMANDS)[number];

export interface CliArgs {
  readonly command: Command;
  readonly configFile: string;
  readonly help: boolean;
  readonly version: boolean;
  /** inspect: the key, and optionally the route (or group) and raw tenant values; clear: both. */
  readonly key: string | undefined;
  readonly route: string | undefined;
  readonly tenant: readonly string[];
  readonly body: boolean;
  /** clean: remove, not only tell. */
  readonly yes: boolean;
}

export const DEFAULT_CONFIG_FILE = 'config/proxy.yaml';

export const USAGE = `Usage: idempotency-proxy [command] [--config FILE]

Commands:
  serve     run the proxy (default)
  check     validate the config and print the resolved routes (exit 2 on errors)
  migrate   apply the store's schema migrations and exit
  prune     delete expired records now and exit
  reconcile [--route R]
            ask the upstreams about unknown outcomes now (idempotency.reconcile), one sweep, and exit
  inspect KEY [--route R] [--tenant T]... [--body]
            print the record(s) stored for KEY: state, attempts, replays, times, status, history
  clear ROUTE KEY [--tenant T]...
            delete KEY's record on ROUTE (a route or idempotency.group): its next request executes;
            for an unknown outcome (502/504 Idempotency-Outcome: unknown) once the upstream is checked
  clean [--yes]
            remove the embedded PostgreSQL's data directory (every stored key); refused while a
            proxy uses it; without --yes it only says what it would remove

Options:
  -c, --config FILE   config file (default: $IDEMPOTENCY_PROXY_CONFIG or ${DEFAULT_CONFIG_FILE})
  -r, --route R       inspect: the route (or idempotency.group) the key belongs to
  -t, --tenant T      inspect, clear: the raw tenant value, once per tenant part of the route, in order
  -b, --body          inspect: include the stored body
  -y, --yes           clean: really remove it
  -h, --help          show this help
  -v, --version       print the version

Environment: DATABASE_URL (else the embedded PostgreSQL), LOG_LEVEL (info), LOG_FORMAT (json|pretty),
  IDEMPOTENCY_PROXY_CONFIG, IDEMPOTENCY_PROXY_DB_WAIT (seconds to wait for the database, 30)
`;

export class UsageError extends Error {}

const OPTIONS = {
  config: { type: 'string', short: 'c' },
  route: { type: 'string', short: 'r' },
  tenant: { type: 'string', short: 't', multiple: true },
  body: { type: 'boolean', short: 'b' },
  yes: { type: 'boolean', short: 'y' },
  help: { type: 'boolean', short: 'h' },
  version: { type: 'boolean', short: 'v' },
} as const;

/** Our own words for parseArgs's errors, whose text quotes the option with an unclosed quote. */
function optionProblem(error: Error & { code?: string }): string {
  const known = Object.entries(OPTIONS)
    .map(([name, option]) => `--${name} (-${option.short})`)
    .join(', ');
  const option = /option '([^']+)'/i.exec(error.message)?.[1];
  if (error.code === 'ERR_PARSE_ARGS_UNKNOWN_OPTION' && option !== undefined) {
    const name = option.replace(/^-+/, '');
    const near = Object.keys(OPTIONS).find((candidate) => editDistance(candidate, name) <= 2);
    return `unknown option ${option}${near ? ` (did you mean --${near}?)` : ''}; the options are ${known}`;
  }
  if (error.code === 'ERR_PARSE_ARGS_INVALID_OPTION_VALUE') {
    const flag = /--[a-z]+/.exec(error.message)?.[0];
    return flag ? `${flag} needs a value (${flag} VALUE)` : error.message;
  }
  return error.message;
}

function editDistance(a: string, b: string): number {
  let previous = Array.from({ length: b.length + 1 }, (_, i) => i);
  for (let i = 1; i <= a.length; i++) {
    const row = [i];
    for (let j = 1; j <= b.length; j++)
      row[j] = Math.min(
        previous[j]! + 1,
        row[j - 1]! + 1,
        previous[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1),
      );
    previous = row;
  }
  return previous[b.length]!;
}

export function parseCliArgs(
  argv: readonly string[],
  env: NodeJS.ProcessEnv = process.env,
): CliArgs {
  let parsed;
  try {
    parsed = parseArgs({ args: [...argv], allowPositionals: true, options: OPTIONS });
  } catch (error) {
    throw new UsageError(optionProblem(error as Error & { code?: string }));
  }
  const [command = 'serve', ...rest] = parsed.positionals;
  if (!(COMMANDS as readonly string[]).includes(command)) {
    throw new UsageError(`unknown command "${command}"; expected one of: ${COMMANDS.join(', ')}`);
  }
  const help = parsed.values.help === true || parsed.values.version === true;
  const takesKey = command === 'inspect';
  const clears = command === 'clear';
  if (takesKey && rest.length === 0 && !help) throw new UsageError('inspect needs a KEY');
  if (clears && rest.length < 2 && !help)
    throw new UsageError('clear needs a ROUTE and a KEY: idempotency-proxy clear ROUTE KEY');
  const extra = takesKey ? rest.slice(1) : clears ? rest.slice(2) : rest;
  if (extra.length > 0) throw new UsageError(`unexpected argument "${extra[0]}"`);
  if (parsed.values.yes && command !== 'clean') throw new UsageError('--yes goes with clean');
  if (clears && (parsed.values.route || parsed.values.body))
    throw new UsageError('clear takes the route as its first argument, and no --body');
  if (!takesKey && !clears && (parsed.values.route || parsed.values.tenant || parsed.values.body)) {
    throw new UsageError('--route, --tenant and --body go with inspect (--tenant with clear too)');
  }
  return {
    command: command as Command,
    configFile: parsed.values.config ?? env.IDEMPOTENCY_PROXY_CONFIG ?? DEFAULT_CONFIG_FILE,
    help: parsed.values.help === true,
    version: parsed.values.version === true,
    key: takesKey ? rest[0] : clears ? rest[1] : undefined,
    route: clears ? rest[0] : parsed.values.route,
    tenant: parsed.values.tenant ?? [],
    body: parsed.values.body === true,
    yes: parsed.values.yes === true,
  };
}
