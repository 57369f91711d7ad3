// Two test hosts of a test's own: network namespaces joined by a veth pair, with addresses that exist
// only inside them, and the faults a real network has between them: delay (tc netem, where the
// kernel has it), random loss and a partition (nftables rules on each end, which drop packets
// silently, as a lost link does). Removed again by `dispose`, also when the test fails or the
// process exits. Needs root, iproute2 and nftables.
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';

export interface NetnsHost {
  readonly netns: string;
  readonly device: string;
  readonly address: string;
}

export interface NetnsPair {
  readonly a: NetnsHost;
  readonly b: NetnsHost;
  /** tc netem delay on both ends; false when the kernel has no netem (nothing is changed then). */
  delay(ms: number, jitterMs: number): boolean;
  /** Drops this per cent of the packets leaving either end (0 removes the loss). */
  loss(percent: number): void;
  /** Drops every packet between the two, or stops doing so. */
  partition(on: boolean): void;
  dispose(): void;
}

const ip = (...args: string[]): string =>
  execFileSync('ip', args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
const inNetns = (netns: string, command: string[], input?: string): string =>
  execFileSync('ip', ['netns', 'exec', netns, ...command], {
    encoding: 'utf8',
    input,
    stdio: ['pipe', 'pipe', 'pipe'],
  });

/** Why namespaces cannot be made here, or undefined when they can. */
export function netnsUnavailable(): string | undefined {
  if (process.getuid?.() !== 0) return 'network namespaces need root';
  for (const tool of ['/usr/sbin/ip', '/usr/sbin/nft'])
    if (!fs.existsSync(tool)) return `${tool} is missing (apt-get install iproute2 nftables)`;
  return undefined;
}

/** Whether the kernel has sch_netem (tc netem delay). */
export function netemAvailable(): boolean {
  const probe = `ipx-probe-${randomBytes(3).toString('hex')}`;
  try {
    ip('netns', 'add', probe);
    inNetns(probe, ['ip', 'link', 'set', 'lo', 'up']);
    inNetns(probe, ['tc', 'qdisc', 'add', 'dev', 'lo', 'root', 'netem', 'delay', '1ms']);
    return true;
  } catch {
    return false;
  } finally {
    try {
      ip('netns', 'del', probe);
    } catch {
      // it was never made
    }
  }
}

export function createNetnsPair(): NetnsPair {
  const id = randomBytes(3).toString('hex');
  // 10.x addresses that exist only inside the two namespaces: the root namespace gets no route.
  const subnet = `10.${200 + (parseInt(id.slice(0, 2), 16) % 50)}.${parseInt(id.slice(2, 4), 16)}`;
  const a: NetnsHost = { netns: `ipx-${id}-a`, device: `vxa${id}`, address: `${subnet}.1` };
  const b: NetnsHost = { netns: `ipx-${id}-b`, device: `vxb${id}`, address: `${subnet}.2` };
  let disposed = false;
  const dispose = (): void => {
    if (disposed) return;
    disposed = true;
    process.off('exit', dispose);
    for (const host of [a, b]) {
      try {
        ip('netns', 'del', host.netns); // takes its end of the veth pair with it
      } catch {
        // already gone
      }
    }
  };
  process.on('exit', dispose);
  try {
    ip('netns', 'add', a.netns);
    ip('netns', 'add', b.netns);
    ip(
      'link',
      'add',
      a.device,
      'netns',
      a.netns,
      'type',
      'veth',
      'peer',
      'name',
      b.device,
      'netns',
      b.netns,
    );
    for (const host of [a, b]) {
      inNetns(host.netns, ['ip', 'link', 'set', 'lo', 'up']);
      inNetns(host.netns, ['ip', 'addr', 'add', `${host.address}/30`, 'dev', host.device]);
      inNetns(host.netns, ['ip', 'link', 'set', host.device, 'up']);
      // One table per end: a `loss` chain and a `partition` chain, both on the way out of the veth.
      inNetns(
        host.netns,
        ['nft', '-f', '-'],
        `table inet flaky {
           chain loss { type filter hook output priority 0; policy accept; }
           chain partition { type filter hook output priority 1; policy accept; }
         }`,
      );
    }
  } catch (error) {
    dispose();
    throw error;
  }
  const each = (
    command: (host: NetnsHost) => string[],
    input?: (host: NetnsHost) => string,
  ): void => {
    for (const host of [a, b]) inNetns(host.netns, command(host), input?.(host));
  };
  /** Replaces the rule of one chain on both ends: drop what leaves the veth and matches; none: no rule. */
  const dropOnTheWayOut = (chain: 'loss' | 'partition', match: string[] | undefined): void => {
    each(() => ['nft', 'flush', 'chain', 'inet', 'flaky', chain]);
    if (match === undefined) return;
    each((host) => [
      'nft',
      'add',
      'rule',
      'inet',
      'flaky',
      chain,
      'oifname',
      host.device,
      ...match,
      'drop',
    ]);
  };
  return {
    a,
    b,
    delay(ms, jitterMs) {
      try {
        each((host) => [
          'tc',
          'qdisc',
          'replace',
          'dev',
          host.device,
          'root',
          'netem',
          'delay',
          `${ms}ms`,
          `${jitterMs}ms`,
        ]);
        return true;
      } catch {
        return false;
      }
    },
    loss(percent) {
      dropOnTheWayOut(
        'loss',
        percent > 0 ? ['numgen', 'random', 'mod', '100', '<', String(percent)] : undefined,
      );
    },
    partition(on) {
      dropOnTheWayOut('partition', on ? [] : undefined);
    },
    dispose,
  };
}
