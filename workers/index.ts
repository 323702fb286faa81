import { runScheduled } from './cron';
import { createApp } from './http/app';
import { log } from './kernel/log';
import { handleQueue } from './queue';

export { AdmissionGate } from '../durable-objects/admission-gate/index';
export { EdgeGuard } from '../durable-objects/edge-guard/index';
export { GoodsStock } from '../durable-objects/goods-stock/index';
export { LimitsStore } from '../durable-objects/limits-store/index';
export { Metrics } from '../durable-objects/metrics/index';
export { WaitingRoom } from '../durable-objects/waiting-room/index';

const app = createApp();

export default {
  fetch: app.fetch,
  queue: (batch, env, _ctx) => handleQueue(batch, env),
  scheduled(controller, env, ctx) {
    ctx.waitUntil(
      runScheduled(env, controller.scheduledTime).catch((error: unknown) => {
        log.error('cron.failed', { cron: controller.cron, error });
        throw error;
      }),
    );
  },
} satisfies ExportedHandler<Env, unknown>;
