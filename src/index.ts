// The package's library entry, for embedding the proxy in another Node process: load a config,
// `createProxy(config)`, `listen()`, and `close()` when done. Agent builders want the
// idempotency-proxy-client package instead. The lower-level parts stay exported for harnesses that
// bring their own pool.
export { createProxy, type CreateProxyOptions, type EmbeddedProxy } from './embedding';
export { createApp, type App, type AppOptions } from './app';
export { loadConfigFile, parseConfigText } from './compiler/load';
export type { ProxyConfig, RouteConfig, IdempotencyPolicy } from './config/types';
export { PostgresKeyStore } from './store/postgres/key-store';
export { migrate } from './db/migrate';
export { createPool } from './db/pool';
export { CompletionListener } from './store/postgres/completion-listener';
export { ConfigError, ProxyError, ERROR_TABLE, type ErrorCode } from './errors';
