// The replay floor: the least a Node `http` server can do to answer like our proxy's replay. It reads
// each request body to its end (our proxy hashes it before it answers), then writes one fixed answer:
// the status, headers and body of a real replay of our proxy, captured by the replay-floor scenario's
// setup and handed over by IPC. Date, Connection and Keep-Alive are left to Node, as in our proxy.
// Until an answer arrives every request gets 503.
// Started by run-bench with an IPC channel; sends {type:'ready', port}; on {type:'answer', status,
// headers (flat name/value list), body (base64)} answers {type:'answer-set'}. Env: BENCH_PORT.
import http from 'node:http';
import { serveHelper } from './helper-process';

export interface ReplayAnswerMessage {
  readonly type: 'answer';
  readonly status: number;
  readonly headers: readonly string[];
  readonly bodyBase64: string;
}

let answer: { status: number; headers: string[]; body: Buffer } | undefined;

process.on('message', (message: ReplayAnswerMessage) => {
  if (message?.type !== 'answer') return;
  answer = {
    status: message.status,
    headers: [...message.headers],
    body: Buffer.from(message.bodyBase64, 'base64'),
  };
  process.send?.({ type: 'answer-set' });
});

const server = http.createServer((req, res) => {
  req.on('end', () => {
    if (!answer) {
      res.writeHead(503, ['content-length', '0']);
      res.end();
      return;
    }
    res.writeHead(answer.status, answer.headers);
    res.end(answer.body);
  });
  req.resume();
});
serveHelper(server);
