// The MCP demo's task-taking agent, on the wire as revision 2026-07-28 has it (no session: each
// request carries its protocol version, client info and capabilities in `_meta`, and names its
// method in Mcp-Method and its tool or task in Mcp-Name). It declares the tasks extension, so a
// slow call may come back as a task; it keeps the task id where a restart finds it, and a later run
// polls tasks/get until the task is done. Agents in production use the SDK's tasks requester
// (@modelcontextprotocol/ext-tasks); this one shows what goes over the wire.
const REVISION = '2026-07-28';
const TASKS = 'io.modelcontextprotocol/tasks';
const META = {
  'io.modelcontextprotocol/protocolVersion': REVISION,
  'io.modelcontextprotocol/clientInfo': { name: 'demo-report-agent', version: '1.0.0' },
  'io.modelcontextprotocol/clientCapabilities': { extensions: { [TASKS]: {} } },
};

/** A task as the extension describes it (the fields the demo reads). */
export interface DemoTask {
  readonly taskId: string;
  readonly status: 'working' | 'completed' | 'failed' | 'cancelled';
  readonly pollIntervalMs?: number;
  readonly result?: { readonly content?: readonly { readonly text?: string }[] };
  readonly error?: { readonly message?: string };
}

/** What a tools/call came back as: its result at once, or a task to poll. */
export type CallAnswer =
  | { readonly kind: 'result'; readonly text: string }
  | { readonly kind: 'task'; readonly task: DemoTask };

let ids = 0;

/** One JSON-RPC request (2026-07-28 headers) and its result; an error is thrown. */
async function rpc(url: string, method: string, name: string, params: object): Promise<unknown> {
  const answer = await fetch(url, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      accept: 'application/json, text/event-stream',
      'mcp-protocol-version': REVISION,
      'mcp-method': method,
      'mcp-name': name,
    },
    body: JSON.stringify({ jsonrpc: '2.0', id: ++ids, method, params: { ...params, _meta: META } }),
  });
  const text = await answer.text();
  // A JSON answer, or an event stream whose last data line is the response.
  const json = (answer.headers.get('content-type') ?? '').startsWith('text/event-stream')
    ? text
        .split(/\r?\n/)
        .filter((line) => line.startsWith('data:'))
        .at(-1)
        ?.slice(5)
    : text;
  const message = JSON.parse(json ?? 'null') as {
    result?: unknown;
    error?: { message?: string };
  } | null;
  if (message?.error !== undefined) throw new Error(`${method}: ${message.error.message}`);
  return message?.result;
}

/** Calls a tool as an agent that takes tasks. */
export async function callTool(url: string, tool: string, args: object): Promise<CallAnswer> {
  const result = (await rpc(url, 'tools/call', tool, { name: tool, arguments: args })) as {
    resultType?: string;
    content?: readonly { readonly text?: string }[];
  } & DemoTask;
  if (result.resultType === 'task') return { kind: 'task', task: result };
  return { kind: 'result', text: result.content?.[0]?.text ?? '' };
}

/** Polls tasks/get at the task's own interval until it is done; `seen` hears each poll. */
export async function pollTask(
  url: string,
  taskId: string,
  seen: (task: DemoTask) => void,
): Promise<DemoTask> {
  for (;;) {
    const task = (await rpc(url, 'tasks/get', taskId, { taskId })) as DemoTask;
    seen(task);
    if (task.status !== 'working') return task;
    await new Promise((resolve) => setTimeout(resolve, task.pollIntervalMs ?? 1_000));
  }
}
