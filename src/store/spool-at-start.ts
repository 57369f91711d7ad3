// The spool as a serving process opens it (store.outbox.spool): one line for a torn tail, and a
// spool that cannot be used stops the start with what to do about it (exit 2, like a bad setting).
import type { Logger } from 'pino';
import type { ProxyConfig } from '../config/types';
import { StartupError } from '../startup-error';
import { type RecoveredEntry, Spool, SpoolRefused } from './spool';

export async function openSpool(
  dir: string,
  config: ProxyConfig,
  logger: Logger,
): Promise<{ spool: Spool; recovered: RecoveredEntry[] }> {
  try {
    return await Spool.open(dir, {
      maxBytes: config.store.outbox.spoolMaxBytes,
      onTornTail: ({ file, keptEntries, droppedBytes, reason }) =>
        logger.error(
          { spool: file, keptEntries, droppedBytes, reason },
          'store: the spool ends in a torn or damaged record (a crash mid-write, or a bad disk): what came before it is kept, the unreadable tail is dropped',
        ),
    });
  } catch (error) {
    if (!(error instanceof SpoolRefused)) throw error;
    throw new StartupError(`store.outbox.spool: ${error.message}`, { exitCode: 2, cause: error });
  }
}
