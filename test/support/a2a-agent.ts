// A real A2A agent built with the official SDK (@a2a-js/sdk, A2A v1.0 with the v0.3 compatibility
// layer on) on express at port 0, for the A2A route tests (src/a2a/README.md): JSON-RPC at /rpc,
// HTTP+JSON at /rest. Its executor counts executions per messageId and answers with fresh random
// ids, so an answer seen twice is one execution replayed, never two that happen to agree.
//
// A message whose text starts with "reply" is answered with a Message; any other with a Task that
// goes submitted → working → artifact → completed. A test can hold an execution open (`hold`).
import { randomUUID } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { type AgentCard, type Message, Role, TaskState } from '@a2a-js/sdk';
import {
  AgentEvent,
  type AgentExecutor,
  DefaultRequestHandler,
  type ExecutionEventBus,
  InMemoryTaskStore,
  type RequestContext,
} from '@a2a-js/sdk/server';
import {
  agentCardHandler,
  jsonRpcHandler,
  restHandler,
  UserBuilder,
} from '@a2a-js/sdk/server/express';
import express from 'express';

export interface A2aAgent {
  /** The base URL (no path), for a proxy's `upstreams` entry. */
  readonly origin: string;
  /** Executions per messageId. */
  readonly runs: Map<string, number>;
  /** Every HTTP request the agent received: method and path. */
  readonly received: { method: string; path: string }[];
  executions(messageId: string): number;
  /** Holds the next execution of `messageId` until the returned function is called. */
  hold(messageId: string): () => void;
  close(): Promise<void>;
}

class CountingExecutor implements AgentExecutor {
  readonly runs = new Map<string, number>();
  readonly holds = new Map<string, Promise<void>>();

  async execute(context: RequestContext, bus: ExecutionEventBus): Promise<void> {
    const message = context.userMessage;
    this.runs.set(message.messageId, (this.runs.get(message.messageId) ?? 0) + 1);
    await this.holds.get(message.messageId);
    const text = textOf(message);
    const { taskId, contextId } = context;
    if (text.startsWith('reply')) {
      bus.publish(AgentEvent.message(agentMessage(`echo ${text} ${randomUUID()}`, contextId)));
      return;
    }
    const now = () => new Date().toISOString();
    bus.publish(
      AgentEvent.task({
        id: taskId,
        contextId,
        status: { state: TaskState.TASK_STATE_SUBMITTED, timestamp: now(), message: undefined },
        artifacts: [],
        history: [message],
        metadata: undefined,
      }),
    );
    bus.publish(
      AgentEvent.statusUpdate({
        taskId,
        contextId,
        status: { state: TaskState.TASK_STATE_WORKING, timestamp: now(), message: undefined },
        metadata: undefined,
      }),
    );
    bus.publish(
      AgentEvent.artifactUpdate({
        taskId,
        contextId,
        artifact: {
          artifactId: randomUUID(),
          name: 'refund',
          description: '',
          parts: [textPart(`refunded ${text} as ${randomUUID()}`)],
          metadata: undefined,
          extensions: [],
        },
        append: false,
        lastChunk: true,
        metadata: undefined,
      }),
    );
    bus.publish(
      AgentEvent.statusUpdate({
        taskId,
        contextId,
        status: { state: TaskState.TASK_STATE_COMPLETED, timestamp: now(), message: undefined },
        metadata: undefined,
      }),
    );
  }

  cancelTask = async (): Promise<void> => undefined;
}

export function textPart(text: string): Message['parts'][number] {
  return {
    content: { $case: 'text', value: text },
    filename: '',
    mediaType: 'text/plain',
    metadata: undefined,
  };
}

function textOf(message: Message): string {
  const part = message.parts.find((p) => p.content?.$case === 'text');
  return part?.content?.$case === 'text' ? part.content.value : '';
}

function agentMessage(text: string, contextId: string): Message {
  return {
    messageId: randomUUID(),
    role: Role.ROLE_AGENT,
    parts: [textPart(text)],
    contextId,
    taskId: '',
    extensions: [],
    metadata: undefined,
    referenceTaskIds: [],
  };
}

/** A user message as the SDK client sends it. */
export function userMessage(messageId: string, text: string): Message {
  return {
    messageId,
    role: Role.ROLE_USER,
    parts: [textPart(text)],
    contextId: '',
    taskId: '',
    extensions: [],
    metadata: undefined,
    referenceTaskIds: [],
  };
}

/**
 * The agent card for an agent reached at `baseUrl` (the proxy's URL in the tests), over `bindings`
 * (a client picks among them; the agent itself serves both, each in v1.0 and v0.3).
 */
export function agentCard(
  baseUrl: string,
  bindings: readonly ('JSONRPC' | 'HTTP+JSON')[] = ['JSONRPC', 'HTTP+JSON'],
): AgentCard {
  return {
    name: 'Refund agent',
    description: 'Counts its executions per messageId',
    version: '1.0.0',
    supportedInterfaces: bindings.flatMap((binding) =>
      ['1.0', '0.3'].map((protocolVersion) => ({
        url: `${baseUrl}${binding === 'JSONRPC' ? '/rpc' : '/rest'}`,
        protocolBinding: binding,
        tenant: '',
        protocolVersion,
      })),
    ),
    capabilities: { streaming: true, pushNotifications: false, extensions: [] },
    defaultInputModes: ['text/plain'],
    defaultOutputModes: ['text/plain'],
    skills: [],
    provider: { url: '', organization: '' },
    documentationUrl: '',
    securityRequirements: [],
    securitySchemes: {},
    signatures: [],
  };
}

export async function startA2aAgent(): Promise<A2aAgent> {
  const executor = new CountingExecutor();
  const card = agentCard('http://127.0.0.1:0');
  const handler = new DefaultRequestHandler(card, new InMemoryTaskStore(), executor);
  const received: A2aAgent['received'] = [];
  const app = express();
  app.use((req, _res, next) => {
    received.push({ method: req.method, path: req.url });
    next();
  });
  app.use('/.well-known/agent-card.json', agentCardHandler({ agentCardProvider: handler }));
  const options = {
    requestHandler: handler,
    userBuilder: UserBuilder.noAuthentication,
    legacyCompat: { enabled: true },
  };
  app.use('/rpc', jsonRpcHandler(options));
  app.use('/rest', restHandler(options));
  const server = http.createServer(app);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    origin: `http://127.0.0.1:${port}`,
    runs: executor.runs,
    received,
    executions: (messageId) => executor.runs.get(messageId) ?? 0,
    hold(messageId) {
      let release!: () => void;
      executor.holds.set(messageId, new Promise<void>((resolve) => (release = resolve)));
      return () => {
        executor.holds.delete(messageId);
        release();
      };
    },
    async close() {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
