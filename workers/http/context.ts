import type { Config } from '../config';

/** Hono environment shared by every sub-app. */
export type AppEnv = {
  Bindings: Env;
  Variables: {
    /** Trace id of this HTTP request, echoed in error bodies and logs. */
    requestId: string;
    config: Config;
    userId: string;
  };
};
