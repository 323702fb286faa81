// The test services (test-services.ts) as a process of their own: started by
// services-process.ts with its options as a JSON argument, it prints one JSON line with the
// services' addresses, then serves until its stdin ends (the parent closed it, or died), and
// closes them (dropping a fresh database) before it exits.
import type { ServicesProcessOptions } from './services-process.ts';
import { startTestServices } from './test-services.ts';

const options = JSON.parse(process.argv[2] ?? '{}') as ServicesProcessOptions;
const services = await startTestServices(options);
process.stdout.write(
  `${JSON.stringify({
    databaseUrl: services.databaseUrl,
    silentDatabaseUrl: services.silentDatabaseUrl,
    pgWsProxy: services.pgWsProxy,
    redisRestUrl: services.redisRestUrl,
    redisRestToken: services.redisRestToken,
  })}\n`,
);

let closing = false;
async function close(): Promise<void> {
  if (closing) {
    return;
  }
  closing = true;
  await services.close();
  process.exit(0);
}
process.stdin.on('end', () => void close());
process.stdin.on('error', () => void close());
process.stdin.resume();
process.on('SIGTERM', () => void close());
process.on('SIGINT', () => void close());
