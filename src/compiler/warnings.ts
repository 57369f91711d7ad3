// Everything a config may do that is allowed but worth a loud line, at startup, on reload and in
// `check`: leases shorter than the calls they protect, writes that reach a pass-through route, keys
// scoped on a credential that is refreshed.
import { leaseWarnings } from './lease-warnings';
import { routingWarnings } from './routing-warnings';
import { tenantWarnings } from './tenant-warnings';
import type { ProxyConfig } from '../config/types';

export interface ConfigWarning {
  readonly route: string;
  readonly message: string;
}

export function configWarnings(config: ProxyConfig): ConfigWarning[] {
  return [...leaseWarnings(config), ...routingWarnings(config), ...tenantWarnings(config)];
}
