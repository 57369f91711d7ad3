// MCP tasks on a route with mcp.tasks, for an upstream MCP server that knows nothing of them: the
// official SDK v2 client with the tasks extension's requester gets a task for a slow tool call,
// polls it to the real result, resumes it from another client and another proxy instance, cancels
// it; another tenant cannot see it; a proxy killed mid-call leaves it failed; a client without the
// extension sees no change. The upstream is an unmodified SDK v2 server (revision 2026-07-28).
import { resultFromTaskOutcome } from '@modelcontextprotocol/ext-tasks/client';
import { finalMessage, postMcp, resultText } from '../support/mcp-client';
import { until } from '../support/eventually';
import { connectModernClient } from '../support/mcp-modern-server';
import {
  connectTaskClient,
  type SlowToolServer,
  startSlowToolServer,
  type TaskClient,
} from '../support/mcp-task-client';
import { databaseUrl, startProxy, type TestProxy, uniqueTable } from '../support/proxy';
import { startProxyProcess } from '../support/proxy-process';

let upstream: SlowToolServer;

beforeAll(async () => {
  upstream = await startSlowToolServer();
});
afterAll(async () => {
  await upstream?.close();
});

const routes = (lockTimeout = '30s'): string => `
upstreams: { tools: { url: ${new URL(upstream.url).origin}, timeout: 30s } }
routes:
  - name: tools
    match: { path: /mcp }
    upstream: tools
    idempotency:
      lockTimeout: ${lockTimeout}
      tenant: [header:x-tenant]
      mcp: { tasks: { after: 300ms, pollInterval: 200ms } }
`;

const ACME = { 'x-tenant': 'acme' };

type ToolResult = Parameters<typeof resultText>[0];

describe('one proxy', () => {
  let proxy: TestProxy;
  const clients: TaskClient[] = [];
  const connect = async (headers = ACME): Promise<TaskClient> => {
    const client = await connectTaskClient(`${proxy.url}/mcp`, { headers });
    clients.push(client);
    return client;
  };
  beforeAll(async () => {
    proxy = await startProxy({ yaml: routes() });
  });
  afterEach(async () => {
    await Promise.all(clients.splice(0).map((client) => client.close()));
  });
  afterAll(async () => {
    await proxy?.close();
  });

  test('a slow call becomes a task, polled to the real result; the tool ran once', async () => {
    const { session } = await connect();
    const execution = await session.callTool('report', { name: 'q3', seconds: 1.5 });
    expect(execution.kind).toBe('task');
    const { outcome, lastTask } = await execution.settle();
    expect(resultText(resultFromTaskOutcome(outcome) as ToolResult)).toBe('report q3 ready');
    expect(lastTask).toMatchObject({ status: 'completed' });
    expect(upstream.started('q3')).toBe(1);
    // The record is the task's: the same call again replays its result, without running it.
    const again = await session.callTool('report', { name: 'q3', seconds: 1.5 });
    expect(again.kind).toBe('immediate');
    const replayed = resultFromTaskOutcome((await again.settle()).outcome) as ToolResult;
    expect(resultText(replayed)).toBe('report q3 ready');
    expect(upstream.started('q3')).toBe(1);
  });

  test('a fast call is answered at once, and a client without the extension sees no change', async () => {
    const { session } = await connect();
    const fast = await session.callTool('report', { name: 'fast', seconds: 0 });
    expect(fast.kind).toBe('immediate');
    const plain = await connectModernClient(`${proxy.url}/mcp`);
    try {
      const result = await plain.callTool({
        name: 'report',
        arguments: { name: 'plain', seconds: 1 },
      });
      expect(resultText(result as ToolResult)).toBe('report plain ready');
      // Without the extension there are no tasks to ask about.
      const asked = await postMcp(`${proxy.url}/mcp`, taskGet('anything'), ACME);
      expect(finalMessage(asked).error).toMatchObject({ code: -32021 });
    } finally {
      await plain.close();
    }
  });

  test('the server advertises the extension, and its log and metrics show tasks and polls', async () => {
    const { client, session } = await connect();
    expect(client.getServerCapabilities()?.extensions).toEqual({ [TASKS]: {} });
    const execution = await session.callTool('report', { name: 'logged', seconds: 1 });
    expect(execution.kind).toBe('task');
    await execution.settle();
    const lines = proxy.logs.filter((line) => line.msg === 'request' && line.route === 'tools');
    expect(lines).toContainEqual(
      expect.objectContaining({ outcome: 'deferred', tool: 'report', status: 200 }),
    );
    expect(lines).toContainEqual(expect.objectContaining({ outcome: 'polled', status: 200 }));
  });

  test('a retry of the call while it runs gets the same task; the tool runs once', async () => {
    const first = await (
      await connect()
    ).session.callTool('report', { name: 'twice', seconds: 1.5 });
    expect(first.kind).toBe('task');
    // Another client (a restarted agent) sends the same call: same tool, same arguments, same key.
    const second = await (
      await connect()
    ).session.callTool('report', { name: 'twice', seconds: 1.5 });
    expect(second.kind).toBe('task');
    expect(second.handle!.taskId).toBe(first.handle!.taskId);
    const results = await Promise.all([first.settle(), second.settle()]);
    for (const { outcome } of results)
      expect(resultText(resultFromTaskOutcome(outcome) as ToolResult)).toBe('report twice ready');
    expect(upstream.started('twice')).toBe(1);
  });

  test('a tool result with isError: true completes the task (the tool ran)', async () => {
    const { session } = await connect();
    const execution = await session.callTool('broken', { name: 'broke', seconds: 1 });
    expect(execution.kind).toBe('task');
    const { outcome } = await execution.settle();
    expect(outcome.status).toBe('completed');
    expect(resultFromTaskOutcome(outcome)).toMatchObject({ isError: true });
  });

  test('a cancel stops the call upstream; the task ends cancelled, and a retry gets the unknown outcome', async () => {
    const { session } = await connect();
    const execution = await session.callTool('report', { name: 'stop-me', seconds: 20 });
    expect(execution.kind).toBe('task');
    const taskId = execution.handle!.taskId;
    await execution.cancel();
    await until(() => upstream.cancelled('stop-me') === 1, 'the tool to see its call cancelled');
    const task = await until(async () => {
      const polled = finalMessage(await postMcp(`${proxy.url}/mcp`, taskGet(taskId, true), ACME));
      const result = polled.result as { status?: string } | undefined;
      return result?.status === 'working' ? undefined : result;
    }, 'the task to end');
    expect(task).toMatchObject({ status: 'cancelled', resultType: 'complete', taskId });
    // The call's own retry is answered with what its record keeps: the tool may have partly run.
    await expect(session.callTool('report', { name: 'stop-me', seconds: 20 })).rejects.toThrow(
      /cancelled by its client while it ran upstream/,
    );
    expect(upstream.started('stop-me')).toBe(1);
  });

  test('another tenant can neither see nor cancel a task, and learns nothing of it', async () => {
    const { session } = await connect();
    const execution = await session.callTool('report', { name: 'secret', seconds: 1.5 });
    const taskId = execution.handle!.taskId;
    const globex = { 'x-tenant': 'globex' };
    for (const message of [taskGet(taskId, true), taskCancel(taskId)]) {
      const answer = finalMessage(await postMcp(`${proxy.url}/mcp`, message, globex));
      expect(answer.error).toMatchObject({ code: -32602 });
      expect(JSON.stringify(answer)).not.toContain('secret');
    }
    // A made-up id fares the same.
    const forged = `${taskId.slice(0, 23)}${taskId[23] === 'A' ? 'B' : 'A'}${taskId.slice(24)}`;
    const wrong = finalMessage(await postMcp(`${proxy.url}/mcp`, taskGet(forged, true), ACME));
    expect(wrong.error).toMatchObject({ code: -32602 });
    const { outcome } = await execution.settle();
    expect(outcome.status).toBe('completed');
    expect(upstream.cancelled('secret')).toBe(0);
  });
});

test('a task is resumed by id from a new client on another instance, after the first client left', async () => {
  const table = uniqueTable('tasks');
  const first = await startProxy({ yaml: routes(), table });
  const second = await startProxy({ yaml: routes(), table });
  try {
    const leaving = await connectTaskClient(`${first.url}/mcp`, { headers: ACME });
    const execution = await leaving.session.callTool('report', { name: 'resume', seconds: 1.5 });
    if (execution.kind !== 'task') throw new Error(`expected a task, got ${execution.kind}`);
    let saved: unknown;
    await execution.handoff((reference) => {
      saved = reference;
    });
    await leaving.close();

    const resuming = await connectTaskClient(`${second.url}/mcp`, { headers: ACME });
    try {
      const resumed = await resuming.session.resumeTask(saved as never);
      const { outcome } = await resumed.settle();
      expect(resultText(resultFromTaskOutcome(outcome) as ToolResult)).toBe('report resume ready');
    } finally {
      await resuming.close();
    }
    expect(upstream.started('resume')).toBe(1);
  } finally {
    await first.close();
    await second.close();
  }
});

test('a proxy killed mid-call leaves its task failed with the unknown outcome, once the lease ends', async () => {
  const table = uniqueTable('tasks_kill');
  const yaml = `
listen: { host: 127.0.0.1, port: "\${PROXY_PORT}" }
admin: { port: "\${ADMIN_PORT}" }
store: { table: ${table} }
${routes('2s')}`;
  const doomed = await startProxyProcess({ yaml, env: { DATABASE_URL: databaseUrl() } });
  const survivor = await startProxy({ yaml: routes('2s'), table });
  const client = await connectTaskClient(`${doomed.url}/mcp`, { headers: ACME });
  try {
    const execution = await client.session.callTool('report', { name: 'killed', seconds: 6 });
    expect(execution.kind).toBe('task');
    const taskId = execution.handle!.taskId;
    await execution.detach();
    await doomed.kill('SIGKILL');
    const polled = await until(
      async () => {
        const answer = finalMessage(
          await postMcp(`${survivor.url}/mcp`, taskGet(taskId, true), ACME),
        );
        const result = answer.result as { status?: string } | undefined;
        return result?.status === 'working' ? undefined : result;
      },
      'the task to fail',
      { timeoutMs: 10_000, intervalMs: 200 },
    );
    expect(polled).toMatchObject({
      status: 'failed',
      error: { data: { type: 'idempotency_outcome_unknown' } },
    });
    expect(upstream.started('killed')).toBe(1);
  } finally {
    await client.close().catch(() => undefined);
    await survivor.close();
    await doomed.kill();
  }
});

const TASKS = 'io.modelcontextprotocol/tasks';
const DECLARED = {
  'io.modelcontextprotocol/clientCapabilities': { extensions: { [TASKS]: {} } },
};

/** A tasks/get by hand: `declared`, with the extension in its capabilities. */
function taskGet(taskId: string, declared = false): Record<string, unknown> {
  return {
    jsonrpc: '2.0',
    id: 'get-1',
    method: 'tasks/get',
    params: declared ? { taskId, _meta: DECLARED } : { taskId },
  };
}

function taskCancel(taskId: string): Record<string, unknown> {
  return {
    jsonrpc: '2.0',
    id: 'cancel-1',
    method: 'tasks/cancel',
    params: { taskId, _meta: DECLARED },
  };
}
