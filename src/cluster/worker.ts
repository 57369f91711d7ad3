// One worker of a cluster (`workers` > 1): a whole proxy instance — its own pool, completion
// listener, replay cache and app — on the listener node:cluster shares, given the database URL and
// the config text by the primary (cluster/primary.ts). It answers the primary's questions (metrics,
// console counters, reload, forgetting a cleared record) and drains as `serve` does: on the
// primary's word, or on SIGTERM/SIGINT sent to it directly (Ctrl-C reaches the whole process
// group). The primary prunes, owns the embedded PostgreSQL and the admin listener.
import type { AddressInfo } from 'node:net';
import type { Logger } from 'pino';
import { composeProxy, type ProxyInstance } from '../compose';
import { parseConfigText } from '../compiler/load';
import { storePool } from '../db/open-database';
import { boundHeap, listenAll } from '../cli/serve';
import { ProxyMetrics } from '../metrics';
import { StartupError } from '../startup-error';
import { type FromWorker, isToWorker, messageType, type Question, type ToWorker } from './messages';

type Start = Extract<ToWorker, { type: typeof messageType.start }>;

export async function serveWorker(logger: Logger): Promise<number> {
  // Reloads come from the primary, which checks the file first. SIGHUP's default action is to
  // terminate: a SIGHUP sent to the whole process group must not take the workers down.
  process.on('SIGHUP', () => undefined);
  let drain!: (why: string) => void;
  const drained = new Promise<string>((resolve) => (drain = resolve));
  /** Set once it listens: questions are answered and a drain waits for requests from then on. */
  const state: { serving?: ProxyInstance } = {};
  // Before it serves there is nothing in flight: a drain or a signal stops it at once.
  const stopStarting = (): void => process.exit(0);
  process.once('SIGTERM', stopStarting);
  process.once('SIGINT', stopStarting);
  const start = await new Promise<Start>((resolve) => {
    process.on('message', (message: unknown) => {
      if (!isToWorker(message)) return;
      if (message.type === messageType.start) resolve(message);
      else if (message.type === messageType.drain) {
        if (state.serving) drain('the primary');
        else stopStarting();
      } else if (message.type === messageType.ask && state.serving)
        void answer(state.serving, message.id, message.question, logger);
    });
    send({ type: messageType.hello });
  });

  const config = parseConfigText(start.configText, start.configFile);
  const metrics = new ProxyMetrics();
  const pool = storePool(config, start.databaseUrl, logger);
  let instance: ProxyInstance | undefined;
  try {
    instance = await composeProxy({
      config,
      pool,
      databaseUrl: start.databaseUrl,
      logger,
      metrics,
      spoolDir: start.spoolDir,
    });
    await listenAll(
      [{ server: instance.app.server, section: 'listen', what: 'idempotency-proxy' }],
      config,
      logger,
    );
  } catch (error) {
    await instance?.close(0).catch(() => undefined);
    await pool.end().catch(() => undefined);
    // Said once, by the primary, as a single process would have said it.
    send({
      type: messageType.failed,
      message: error instanceof Error ? error.message : String(error),
      exitCode: error instanceof StartupError ? error.exitCode : 1,
    });
    return error instanceof StartupError ? error.exitCode : 1;
  }
  state.serving = instance;
  const heap = boundHeap(config, instance, logger);
  process.off('SIGTERM', stopStarting);
  process.off('SIGINT', stopStarting);
  // Ctrl-C reaches the whole process group: this worker gets its own SIGINT as well as the primary's
  // drain message, in either order. So the first signal drains (or joins the drain the primary
  // began) and only a second one exits without waiting.
  let signals = 0;
  const onSignal = (signal: NodeJS.Signals): void => {
    if (++signals === 1) return drain(signal);
    logger.warn('second signal: worker exiting without waiting');
    process.exit(1);
  };
  process.on('SIGTERM', onSignal);
  process.on('SIGINT', onSignal);
  const { address, port } = instance.app.server.address() as AddressInfo;
  send({ type: messageType.listening, address, port });

  const why = await drained;
  const { app } = instance;
  logger.info(
    { by: why, inFlight: app.inFlight(), graceMs: app.config().shutdownGraceMs },
    'worker draining in-flight requests',
  );
  heap?.stop();
  await instance.close(app.config().shutdownGraceMs);
  await pool.end();
  logger.info('worker stopped');
  return 0;
}

/** One question from the primary, answered from this worker's instance. */
async function answer(
  instance: ProxyInstance,
  id: number,
  question: Question,
  logger: Logger,
): Promise<void> {
  try {
    send({ type: messageType.answer, id, value: await valueFor(instance, question) });
  } catch (error) {
    if (question.what === 'reload')
      logger.error({ reason: (error as Error).message }, 'worker kept its configuration');
    send({ type: messageType.answer, id, error: (error as Error).message });
  }
}

async function valueFor(instance: ProxyInstance, question: Question): Promise<unknown> {
  switch (question.what) {
    case 'metrics':
      instance.metrics.waiting(instance.listener.stats.waiting);
      return instance.metrics.registry.getMetricsAsJSON();
    case 'outcomes':
      return instance.metrics.recentOutcomes.snapshot();
    case 'reload':
      instance.reload(parseConfigText(question.configText, instance.app.config().file));
      return true;
    case 'forget':
      // As the clear's NOTIFY does when it arrives (later, and still: other hosts rely on it).
      for (const digest of question.digests) instance.cache?.evict(digest);
      return true;
  }
}

function send(message: FromWorker): void {
  // The channel closes when the primary is gone; node:cluster then ends this worker itself.
  if (process.connected) process.send!(message);
}
