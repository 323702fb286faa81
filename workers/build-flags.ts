// Build-time switches. wrangler's `define` replaces __DEV_FEATURES__ per environment
// (staging/production set it to false), and the bundler then drops the dev-only code
// (the dev token route, the sandbox payment provider) from those builds entirely.
declare const __DEV_FEATURES__: boolean | undefined;

/** True in local builds and tests; false in staging and production bundles. */
export const DEV_FEATURES: boolean = typeof __DEV_FEATURES__ === 'undefined' ? true : __DEV_FEATURES__;
