// What a config test reads back: the config a YAML text compiles to, or the issues it is refused with.
import { parseConfigText } from '../../src/compiler/load';
import type { ProxyConfig } from '../../src/config/types';
import { ConfigError, type ConfigIssue } from '../../src/errors';

export function parseYaml(text: string): ProxyConfig {
  return parseConfigText(text, 'proxy.yaml', {});
}

/** The issues a text is refused with; fails the test when it is accepted. */
export function configIssues(text: string): ConfigIssue[] {
  try {
    parseYaml(text);
  } catch (error) {
    if (error instanceof ConfigError) return [...error.issues];
    throw error;
  }
  throw new Error('expected a ConfigError');
}
