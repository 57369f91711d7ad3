export default async function globalTeardown(): Promise<void> {
  const stop = (globalThis as Record<string, unknown>).__EMBEDDED_PG__ as
    (() => Promise<void>) | undefined;
  if (stop) await stop();
}
