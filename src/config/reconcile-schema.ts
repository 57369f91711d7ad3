// idempotency.reconcile: how a route asks its upstream whether an unknown outcome happened
// (docs/reconcile.md); compiled by compiler/reconcile-config.ts.
import { z } from 'zod';
import {
  duration,
  headerName,
  jsonPointer,
  method,
  opt,
  pattern,
  status,
  strict,
} from './schema-formats';

export const probePath = pattern(
  /^\/[^\s]*$/,
  'expected a path starting with "/", with {key} and {body:/json/pointer} placeholders',
  'probe path',
);
export const statusList = z.array(status).min(1, { error: 'expected at least one status code' });

export const reconcileBlock = strict(
  {
    request: opt(
      strict(
        {
          method: opt(method, "The probe's method.", 'GET'),
          path: probePath.describe(
            "The probe's path and query on the route's upstream: {key} is the key as forwarded, {body:/json/pointer} a value of the original body.",
          ),
          headers: opt(
            z.record(headerName, z.string()),
            "Headers the probe sends (${ENV} interpolated); absent: a retry's own headers, when one triggers it.",
          ),
        },
        'probe request settings (method, path, headers)',
      ),
      'The HTTP request that asks the upstream whether the call happened (REST routes).',
    ),
    tool: opt(
      strict(
        {
          name: z.string({ error: 'expected a tool name' }).min(1).describe('The tool to call.'),
          arguments: opt(
            z.record(z.string(), z.unknown()),
            'Its arguments; strings may hold {key} and {arguments:/json/pointer} (a value of the original call).',
          ),
        },
        'probe tool settings (name, arguments)',
      ),
      'The tool call that asks an MCP server whether the call happened (MCP routes).',
    ),
    found: opt(
      strict(
        {
          status: opt(statusList, 'Probe statuses that may mean found.', [200]),
          exists: opt(jsonPointer, 'A pointer the probe body must have to mean found.'),
        },
        'found settings (status, exists)',
      ),
      'When the probe says the call happened.',
    ),
    notFound: opt(
      strict(
        {
          status: opt(statusList, 'Probe statuses that mean not found.', [404]),
        },
        'notFound settings (status)',
      ),
      'When the probe says the call never happened (also: a found status without exists).',
    ),
    answer: opt(
      strict(
        {
          status: opt(status, "The status repeats get (default: the probe's)."),
          body: opt(jsonPointer, 'The part of the probe body repeats get (default: all of it).'),
        },
        'answer settings (status, body)',
      ),
      'What every repeat gets once found.',
    ),
    after: opt(
      duration({ positive: true }),
      "How long after the original was sent a probe may be trusted to say not found; at least the upstream's timeout.",
      '5s',
    ),
    every: opt(
      // 0 written bare, as the docs write it, is 0s.
      z.preprocess((value: unknown) => (value === 0 ? '0s' : value), duration({})),
      'How often the background sweep probes unknown outcomes; 0 = only when a retry arrives.',
      '30s',
    ),
    giveUpAfter: opt(
      duration({ positive: true }),
      'Stop probing a record this long after the original was sent; it stays unknown for an operator.',
      '24h',
    ),
  },
  'reconcile settings (request or tool, found, notFound, answer, after, every, giveUpAfter)',
);
