// Which environment variables each setting of a loaded config was read from (`port: ${PROXY_PORT:-8080}`),
// so a startup error about a value can name what to change: "listen.port (PROXY_PORT)". Kept beside
// the config rather than in it: only error messages need it, and the config's type stays the schema's.

const sourcesByConfig = new WeakMap<object, ReadonlyMap<string, readonly string[]>>();

/** `sources`: YAML path (`listen.port`) → the variables its value references. */
export function recordEnvSources(
  config: object,
  sources: ReadonlyMap<string, readonly string[]>,
): void {
  sourcesByConfig.set(config, sources);
}

/** `listen.port (PROXY_PORT)` when the value came from ${PROXY_PORT…}, else `listen.port`. */
export function settingName(config: object, path: string): string {
  const variables = sourcesByConfig.get(config)?.get(path) ?? [];
  return variables.length === 0 ? path : `${path} (${variables.join(', ')})`;
}

/** `${A}` or `${A}, ${B}`: how an error message names where a value came from. */
export function variableList(variables: readonly string[]): string {
  return variables.map((name) => `\${${name}}`).join(', ');
}
