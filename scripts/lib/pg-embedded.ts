// Embedded PostgreSQL for local runs: PGlite (PostgreSQL compiled to WASM) behind a small
// wire-protocol server on a real TCP port, so the Worker reaches it exactly as it would a
// server: Neon driver -> WebSocket bridge -> TCP.
//
// PGlite is ONE backend session. Many client connections are multiplexed onto it, so the
// server must never interleave their messages in a way a real server would not:
// - an extended-protocol exchange (Parse/Bind/Describe/Execute ... Sync) runs as one unit,
//   or another connection's Parse replaces the unnamed statement in between;
// - an open transaction keeps the session to its connection until it ends.
// (pglite-socket interleaves at message granularity, which breaks both under concurrency.)
import net from 'node:net';
import { PGlite } from '@electric-sql/pglite';

const SSL_REQUEST = 80877103;
const CANCEL_REQUEST = 80877102;

/** A FIFO lock over the one session, with the owner known so a transaction can keep it. */
type Waiter = { who: number; resolve: () => void };
type Unit = { kind: 'ssl' } | { kind: 'cancel' } | { kind: 'terminate' } | { kind: 'run'; messages: Buffer[] };

function sessionLock() {
  let owner: number | null = null;
  const queue: Waiter[] = [];
  return {
    get owner() {
      return owner;
    },
    acquire(who: number): Promise<void> {
      if (owner === who) {
        return Promise.resolve();
      }
      if (owner === null) {
        owner = who;
        return Promise.resolve();
      }
      return new Promise<void>((resolve) => queue.push({ who, resolve }));
    },
    release(who: number): void {
      if (owner !== who) {
        return;
      }
      const next = queue.shift();
      owner = next ? next.who : null;
      next?.resolve();
    },
    forget(who: number): void {
      for (let i = queue.length - 1; i >= 0; i--) {
        if (queue[i]?.who === who) {
          queue.splice(i, 1);
        }
      }
    },
  };
}

/** Splits a client's byte stream into units to run atomically: startup, or messages up to Sync/Query/Terminate. */
function unitReader() {
  let pending: Buffer = Buffer.alloc(0);
  let startup = true;
  let unit: Buffer[] = [];
  return {
    push(chunk: Buffer): Unit[] {
      pending = pending.length ? Buffer.concat([pending, chunk]) : chunk;
      const units: Unit[] = [];
      for (;;) {
        if (startup) {
          if (pending.length < 8) {
            break;
          }
          const length = pending.readInt32BE(0);
          if (pending.length < length) {
            break;
          }
          const code = pending.readInt32BE(4);
          const message = pending.subarray(0, length);
          pending = pending.subarray(length);
          if (code === SSL_REQUEST) {
            units.push({ kind: 'ssl' });
          } else if (code === CANCEL_REQUEST) {
            units.push({ kind: 'cancel' });
          } else {
            startup = false;
            units.push({ kind: 'run', messages: [message] });
          }
          continue;
        }
        if (pending.length < 5) {
          break;
        }
        const length = pending.readInt32BE(1) + 1;
        if (pending.length < length) {
          break;
        }
        const type = pending[0];
        const message = pending.subarray(0, length);
        pending = pending.subarray(length);
        if (type === 0x58) {
          units.push({ kind: 'terminate' });
          continue;
        }
        unit.push(message);
        // Sync ('S') ends an extended exchange; a simple Query ('Q') is one by itself.
        if (type === 0x53 || type === 0x51) {
          units.push({ kind: 'run', messages: unit });
          unit = [];
        }
      }
      return units;
    },
  };
}

export type EmbeddedPostgres = {
  url: string;
  port: number;
  /** The database's files as they are now, to start another database from (`from`). */
  snapshot(): Promise<Blob>;
  close(): Promise<void>;
};

/**
 * Starts PGlite on 127.0.0.1. `dataDir` undefined = in memory; `from`: a snapshot of another
 * embedded database to start as (in about a quarter of the time a new one takes).
 */
export async function startEmbeddedPostgres({
  dataDir,
  port = 0,
  from,
}: {
  dataDir?: string;
  port?: number;
  from?: Blob;
} = {}): Promise<EmbeddedPostgres> {
  const db = await PGlite.create({ ...(dataDir ? { dataDir } : {}), ...(from ? { loadDataDir: from } : {}) });
  const lock = sessionLock();
  const sockets = new Set<net.Socket>();
  let nextId = 1;

  const server = net.createServer((socket) => {
    const id = nextId++;
    const reader = unitReader();
    let chain: Promise<void> = Promise.resolve();
    let closed = false;
    sockets.add(socket);
    socket.setNoDelay(true);

    const runUnit = async (messages: Buffer[]) => {
      await lock.acquire(id);
      try {
        for (const message of messages) {
          await db.execProtocolRawStream(message, {
            onRawData: (data) => {
              if (!closed) {
                socket.write(Buffer.from(data));
              }
            },
          });
        }
      } finally {
        // Inside a transaction the session stays this connection's until it ends.
        if (!db.isInTransaction() || closed) {
          lock.release(id);
        }
      }
    };

    const finish = async () => {
      if (closed) {
        return;
      }
      closed = true;
      sockets.delete(socket);
      lock.forget(id);
      if (lock.owner === id) {
        if (db.isInTransaction()) {
          await db.exec('ROLLBACK').catch(() => {});
        }
        lock.release(id);
      }
    };

    socket.on('data', (chunk) => {
      for (const unit of reader.push(chunk)) {
        chain = chain.then(async () => {
          if (closed) {
            return;
          }
          if (unit.kind === 'ssl') {
            socket.write('N');
          } else if (unit.kind === 'cancel' || unit.kind === 'terminate') {
            socket.end();
            await finish();
          } else {
            await runUnit(unit.messages).catch(() => socket.destroy());
          }
        });
      }
    });
    socket.on('close', () => {
      chain = chain.then(finish);
    });
    socket.on('error', () => socket.destroy());
  });

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', resolve);
  });
  const address = server.address();
  const actualPort = typeof address === 'object' && address ? address.port : port;
  return {
    url: `postgres://postgres:postgres@127.0.0.1:${actualPort}/postgres`,
    port: actualPort,
    snapshot: () => db.dumpDataDir('none'),
    async close() {
      for (const s of sockets) {
        s.destroy();
      }
      await new Promise((resolve) => server.close(() => resolve(undefined)));
      await db.close();
    },
  };
}
