// Embedded PostgreSQL for local runs: PGlite (PostgreSQL compiled to WASM) served on a
// real TCP port through pglite-socket, so the Worker reaches it exactly as it would a
// server: Neon driver -> WebSocket bridge -> TCP.
import { PGlite } from '@electric-sql/pglite';
import { PGLiteSocketServer } from '@electric-sql/pglite-socket';

/**
 * Starts PGlite on 127.0.0.1. `dataDir` undefined = in memory.
 * @returns {Promise<{url: string, port: number, close: () => Promise<void>}>}
 */
export async function startEmbeddedPostgres({ dataDir, port = 0, maxConnections = 64 } = {}) {
  const db = await PGlite.create(dataDir ? { dataDir } : {});
  const server = new PGLiteSocketServer({ db, host: '127.0.0.1', port, maxConnections });
  await server.start();
  const actualPort = Number(server.getServerConn().split(':').pop());
  return {
    url: `postgres://postgres:postgres@127.0.0.1:${actualPort}/postgres`,
    port: actualPort,
    async close() {
      await server.stop();
      await db.close();
    },
  };
}
