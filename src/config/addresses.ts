// `trustedProxies` entries (an address or a CIDR) and the check a request's peer goes through. Node's
// BlockList does the matching; IPv4-mapped IPv6 peers (`::ffff:10.0.0.1`, what a dual-stack listener
// reports) are checked as the IPv4 address they are.
import { BlockList, isIP } from 'node:net';

export interface AddressRange {
  readonly address: string;
  readonly family: 'ipv4' | 'ipv6';
  readonly prefix: number;
}

/** `10.0.0.0/8`, `127.0.0.1`, `::1`, `fd00::/8`; undefined when it is none of these. */
export function parseAddressOrCidr(text: string): AddressRange | undefined {
  const slash = text.indexOf('/');
  const address = slash === -1 ? text : text.slice(0, slash);
  const version = isIP(address);
  if (version === 0) return undefined;
  const family = version === 4 ? 'ipv4' : 'ipv6';
  const max = version === 4 ? 32 : 128;
  if (slash === -1) return { address, family, prefix: max };
  const bits = text.slice(slash + 1);
  if (!/^\d{1,3}$/.test(bits) || Number(bits) > max) return undefined;
  return { address, family, prefix: Number(bits) };
}

/** A predicate over peer addresses; always false for an empty list (nothing to look up). */
export function compileTrustedPeers(
  entries: readonly string[],
): (peer: string | undefined) => boolean {
  if (entries.length === 0) return () => false;
  const list = new BlockList();
  for (const entry of entries) {
    const range = parseAddressOrCidr(entry);
    if (range === undefined) throw new TypeError(`not an address or CIDR: ${entry}`);
    list.addSubnet(range.address, range.prefix, range.family);
  }
  return (peer) => {
    if (peer === undefined) return false;
    const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(peer);
    if (mapped) return list.check(mapped[1]!, 'ipv4');
    const version = isIP(peer);
    return version !== 0 && list.check(peer, version === 4 ? 'ipv4' : 'ipv6');
  };
}
