// Command-line parsing shared by every command: `idempotency-proxy [command] [--config FILE]`.
import { parseArgs } from 'node:util';

export const COMMANDS = ['serve', 'check', 'migrate'] as const;
export type Command = (typeof COMMANDS)[number];

export interface CliArgs {
  readonly command: Command;
  readonly configFile: string;
  readonly help: boolean;
}

export const DEFAULT_CONFIG_FILE = 'config/proxy.yaml';

export const USAGE = `Usage: idempotency-proxy [command] [--config FILE]

Commands:
  serve     run the proxy (default)
  check     validate the config and print the resolved routes (exit 2 on errors)
  migrate   apply the store's schema migrations and exit

Options:
  -c, --config FILE   config file (default: $IDEMPOTENCY_PROXY_CONFIG or ${DEFAULT_CONFIG_FILE})
  -h, --help          show this help
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
        help: { type: 'boolean', short: 'h' },
      },
    });
  } catch (error) {
    throw new UsageError((error as Error).message);
  }
  const [command = 'serve', ...extra] = parsed.positionals;
  if (!(COMMANDS as readonly string[]).includes(command)) {
    throw new UsageError(`unknown command "${command}"; expected one of: ${COMMANDS.join(', ')}`);
  }
  if (extra.length > 0) throw new UsageError(`unexpected argument "${extra[0]}"`);
  return {
    command: command as Command,
    configFile: parsed.values.config ?? env.IDEMPOTENCY_PROXY_CONFIG ?? DEFAULT_CONFIG_FILE,
    help: parsed.values.help === true,
  };
}
