// The load tools' HTTP client against a server that closes kept-alive connections under it, as
// workerd does when a handler answers without reading the request's body.
import { once } from 'node:events';
import { createServer, type Server, type Socket } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { httpClient } from '../../scripts/lib/load/http-client.ts';

/**
 * A minimal HTTP/1.1 server: each connection answers its first request (kept alive) and resets
 * on its second, before answering it (with `resetFirst`, on its first). Counts the requests it answered.
 */
async function oneRequestAConnection(
  resetFirst = false,
): Promise<{ server: Server; url: string; answered: () => number; connections: () => number }> {
  let answered = 0;
  let connections = 0;
  const server = createServer((socket: Socket) => {
    connections++;
    let requests = 0;
    let buffered = '';
    socket.on('data', (chunk) => {
      buffered += chunk.toString('latin1');
      while (buffered.includes('\r\n\r\n')) {
        buffered = buffered.slice(buffered.indexOf('\r\n\r\n') + 4);
        requests++;
        if (requests > 1 || resetFirst) {
          socket.resetAndDestroy();
          return;
        }
        answered++;
        socket.write(
          'HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 11\r\nconnection: keep-alive\r\n\r\n{"ok":true}',
        );
      }
    });
    socket.on('error', () => {});
  });
  return { server, url: await listening(server), answered: () => answered, connections: () => connections };
}

/** Starts `server` on a free port of 127.0.0.1; its URL. */
async function listening(server: Server): Promise<string> {
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const address = server.address();
  if (!address || typeof address === 'string') {
    throw new Error('no port');
  }
  return `http://127.0.0.1:${address.port}`;
}

describe('httpClient', () => {
  let server: Server | undefined;
  afterEach(() => {
    server?.close();
  });

  it('sends a request again on a new connection when its kept-alive one was closed, even when every pooled one was', async () => {
    const s = await oneRequestAConnection();
    server = s.server;
    const http = httpClient(s.url, { maxSockets: 4, timeoutMs: 5_000 });
    try {
      // Four connections, each answered once and kept in the pool.
      const first = await Promise.all(Array.from({ length: 4 }, () => http.get('/')));
      expect(first.map((a) => a.status)).toEqual([200, 200, 200, 200]);
      expect(s.connections()).toBe(4);

      // Each pooled connection now resets its next request. One request at a time, so the pool
      // still holds closed connections when a retry goes out: it must not take one of them.
      const again = [];
      for (let i = 0; i < 4; i++) {
        again.push(await http.post('/', { json: { n: i } }));
      }
      expect(again.map((a) => `${a.status}${a.error ? ` ${a.error}` : ''}`)).toEqual(['200', '200', '200', '200']);
      expect(http.staleRetries).toBe(4);
      expect(s.answered()).toBe(8);
    } finally {
      http.close();
    }
  });

  it('says what a request without an answer went out on, and when it failed', async () => {
    const s = await oneRequestAConnection(true);
    server = s.server;
    const http = httpClient(s.url, { maxSockets: 1, timeoutMs: 5_000 });
    try {
      const before = Date.now();
      const lost = await http.post('/', { json: {} });
      // A reset, not a close: Node says which.
      expect(lost).toMatchObject({ status: 0, error: 'ECONNRESET', failure: { connection: 'new', message: 'read ECONNRESET' } });
      expect(lost.failure?.at).toBeGreaterThanOrEqual(before);
      expect(http.staleRetries).toBe(0);
    } finally {
      http.close();
    }
  });

  it('names a connection sent again after its kept-alive one was closed, when that one fails too', async () => {
    const s = await oneRequestAConnection();
    server = s.server;
    const http = httpClient(s.url, { maxSockets: 1, timeoutMs: 5_000 });
    try {
      expect((await http.get('/')).status).toBe(200);
      // The kept-alive connection resets its second request; the new connection for the retry
      // meets a server that resets at once.
      const answered = s.answered();
      s.server.removeAllListeners('connection');
      s.server.on('connection', (socket: Socket) => socket.once('data', () => socket.resetAndDestroy()));
      const lost = await http.post('/', { json: {} });
      expect(lost).toMatchObject({ status: 0, error: 'ECONNRESET', failure: { connection: 'new, after a kept-alive one was closed' } });
      expect(http.staleRetries).toBe(1);
      expect(s.answered()).toBe(answered);
    } finally {
      http.close();
    }
  });

  it('sends again a request that waited for a pooled connection the server then closed under it', async () => {
    // The server answers a connection's first request and closes it 30 ms later without answering
    // another. With one socket in the pool the second request waits in the agent's queue and is
    // handed the socket as the first answer ends, as a kept-alive one, though Node does not call
    // it reused: the close takes it unanswered.
    let connections = 0;
    server = createServer((socket: Socket) => {
      connections++;
      let answered = false;
      socket.on('data', () => {
        if (!answered) {
          answered = true;
          socket.write('HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: keep-alive\r\n\r\nok');
          setTimeout(() => socket.end(), 30);
        }
      });
      socket.on('error', () => {});
    });
    const http = httpClient(await listening(server), { maxSockets: 1, timeoutMs: 5_000 });
    try {
      const answers = await Promise.all([http.post('/', { json: { n: 1 } }), http.post('/', { json: { n: 2 } })]);
      expect(answers.map((a) => `${a.status}${a.error ? ` ${a.error}` : ''}`)).toEqual(['200', '200']);
      expect(http.staleRetries).toBe(1);
      expect(connections).toBe(2);
    } finally {
      http.close();
    }
  });
});
