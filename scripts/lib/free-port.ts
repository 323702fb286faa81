// A TCP port on 127.0.0.1 that nothing listens on right now, for the services a tool or test
// starts itself (the dev stack's own ports, a test's private redis-server, an inspector).
import { once } from 'node:events';
import { createServer } from 'node:net';

/** A port that was free a moment ago. */
export async function freePort(): Promise<number> {
  const server = createServer().listen(0, '127.0.0.1');
  await once(server, 'listening');
  const address = server.address();
  await new Promise((resolve) => server.close(resolve));
  if (!address || typeof address === 'string') {
    throw new Error('no TCP port was assigned');
  }
  return address.port;
}

/** Whether nothing listens on `port` of 127.0.0.1 right now. */
export async function isPortFree(port: number): Promise<boolean> {
  const server = createServer();
  return new Promise((resolve) => {
    server.once('error', () => resolve(false));
    server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)));
  });
}
