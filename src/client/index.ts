// `idempotency-proxy/client`, kept for code written before the client became its own package: the
// same module as idempotency-proxy-client (a dependency of the proxy, with no dependencies itself).
export * from 'idempotency-proxy-client';
