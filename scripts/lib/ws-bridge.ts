// Neon's two front doors, locally, on one port in front of a plain Postgres (PGlite or a real
// server). In production Neon serves both itself:
// - WebSocket -> TCP: the Worker's Pool connects here (neonConfig.wsProxy, path /v1) and each
//   WebSocket is piped to a Postgres TCP socket;
// - SQL over HTTP: `POST /sql` (neonConfig.fetchEndpoint), one query or one transaction per
//   request, on warm connections (sql-http.ts).
// `GET /stats` answers `{sessions, open, sqlRequests}`: Postgres sessions the WebSocket door has
// opened since the bridge started, how many are open now, and the SQL-over-HTTP requests it has
// taken (tests and the bench count what a route costs with it).
import http from 'node:http';
import net from 'node:net';
import { type RawData, WebSocketServer } from 'ws';
import { sqlOverHttp } from './sql-http.ts';

const SSL_REQUEST = 80877103;

/**
 * Follows the client's side of the Postgres protocol just enough to see message boundaries:
 * untyped startup messages (and SSLRequest) first, then `type:u8 length:i32 body`.
 * `push` returns true once a Terminate message has been seen.
 */
function terminateWatcher() {
  let pending: Buffer = Buffer.alloc(0);
  let startup = true;
  return {
    push(chunk: Buffer): boolean {
      pending = pending.length ? Buffer.concat([pending, chunk]) : chunk;
      for (;;) {
        const headerLength = startup ? 4 : 5;
        if (pending.length < headerLength) {
          return false;
        }
        const length = startup ? pending.readInt32BE(0) : pending.readInt32BE(1) + 1;
        if (!startup && pending[0] === 0x58) {
          return true;
        }
        if (pending.length < length) {
          return false;
        }
        if (startup && !(length === 8 && pending.readInt32BE(4) === SSL_REQUEST)) {
          startup = false;
        }
        pending = pending.subarray(length);
      }
    },
  };
}

export type WsBridge = { port: number; proxy: string; sqlEndpoint: string; close(): Promise<void> };

/**
 * Starts the bridge on 127.0.0.1. Only targets in `allow` ("host:port") are reachable.
 * `proxy` is host:port for neonConfig.wsProxy; `sqlEndpoint` the URL for neonConfig.fetchEndpoint.
 */
export async function startWsBridge({ port = 0, allow }: { port?: number; allow: Iterable<string> }): Promise<WsBridge> {
  const allowed = new Set(allow);
  const sql = sqlOverHttp({ allow: allowed });
  const stats = { sessions: 0, open: 0, sqlRequests: 0 };
  const server = http.createServer((req, res) => {
    const path = new URL(req.url ?? '/', 'http://bridge').pathname;
    if (path === '/sql') {
      stats.sqlRequests++;
      sql.handle(req, res).catch(() => res.destroy());
      return;
    }
    if (path === '/stats' && req.method === 'GET') {
      req.resume();
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(stats));
      return;
    }
    req.resume();
    res.writeHead(404, { 'content-type': 'application/json' }).end(JSON.stringify({ message: 'not found' }));
  });
  // Workers keep their connections to a host alive; a server that closes idle ones sooner than
  // the client expects makes a request fail now and then on a half-closed socket.
  server.keepAliveTimeout = 60_000;
  const wss = new WebSocketServer({ server, perMessageDeflate: false });
  const sockets = new Set<net.Socket>();

  wss.on('connection', (ws, req) => {
    const target = new URL(req.url ?? '/', 'http://bridge').searchParams.get('address') ?? '';
    if (!allowed.has(target)) {
      ws.close(1008, 'target not allowed');
      return;
    }
    const [host, portText] = target.split(':');
    const frames = terminateWatcher();
    const tcp = net.connect({ host, port: Number(portText), noDelay: true });
    sockets.add(tcp);
    stats.sessions++;
    stats.open++;
    // Frames that arrive before the TCP connect completes are buffered by net.Socket.
    ws.on('message', (data: RawData) => {
      const buf = Array.isArray(data) ? Buffer.concat(data) : Buffer.isBuffer(data) ? data : Buffer.from(data);
      tcp.write(buf);
      // Terminate ('X') is the client's last message. A real server hangs up after it;
      // PGlite does not, so the bridge does, or every closed pool leaks a connection slot.
      if (frames.push(buf)) {
        tcp.end();
        ws.close();
      }
    });
    tcp.on('data', (chunk) => {
      if (ws.readyState === ws.OPEN) {
        ws.send(chunk);
      }
    });
    const closeBoth = () => {
      if (sockets.delete(tcp)) {
        stats.open--;
      }
      tcp.destroy();
      if (ws.readyState === ws.OPEN || ws.readyState === ws.CONNECTING) {
        ws.close();
      }
    };
    tcp.on('close', closeBoth);
    tcp.on('error', closeBoth);
    ws.on('close', closeBoth);
    ws.on('error', closeBoth);
  });

  await new Promise<void>((resolve, reject) => {
    server.once('listening', resolve);
    server.once('error', reject);
    server.listen(port, '127.0.0.1');
  });
  const address = server.address();
  const actualPort = typeof address === 'object' && address ? address.port : port;
  return {
    port: actualPort,
    proxy: `127.0.0.1:${actualPort}`,
    sqlEndpoint: `http://127.0.0.1:${actualPort}/sql`,
    async close() {
      for (const s of sockets) {
        s.destroy();
      }
      for (const client of wss.clients) {
        client.terminate();
      }
      await new Promise((resolve) => wss.close(() => resolve(undefined)));
      server.closeAllConnections();
      await new Promise((resolve) => server.close(() => resolve(undefined)));
      await sql.close();
    },
  };
}
