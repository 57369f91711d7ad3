// The proxy's and the admin's servers: plain HTTP, or HTTPS when the section has `tls`. The TLS
// material was read and checked when the config was compiled (config/tls-files.ts), so making a
// server cannot fail on a file; a reload hands the new material to the running server, whose open
// connections keep the context they were made with (Node's setSecureContext), like Caddy or nginx.
import http from 'node:http';
import https from 'node:https';
import type tls from 'node:tls';
import type { ServerTlsConfig } from './config/types';

export type Listener = http.Server | https.Server;

/** The secure context's part: what a SIGHUP may change. */
function contextOptions(config: ServerTlsConfig): tls.SecureContextOptions {
  return {
    cert: config.cert.pem,
    key: config.key.pem,
    ...(config.ca ? { ca: config.ca.pem } : {}),
  };
}

export function createListener(
  config: ServerTlsConfig | undefined,
  options: http.ServerOptions,
  handler: http.RequestListener,
): Listener {
  if (!config) return http.createServer(options, handler);
  return https.createServer(
    {
      ...options,
      ...contextOptions(config),
      // One protocol: the proxy speaks HTTP/1.1 to clients (a client offering only h2 is refused).
      ALPNProtocols: ['http/1.1'],
      requestCert: config.clientAuth !== 'none',
      rejectUnauthorized: config.clientAuth === 'require',
    },
    handler,
  );
}

/** A reload's new certificate, key and CA, for connections made from now on. */
export function reloadListenerTls(server: Listener, config: ServerTlsConfig | undefined): void {
  if (config && server instanceof https.Server) server.setSecureContext(contextOptions(config));
}

/** http or https, for log lines. */
export function schemeOf(server: Listener): 'http' | 'https' {
  return server instanceof https.Server ? 'https' : 'http';
}
