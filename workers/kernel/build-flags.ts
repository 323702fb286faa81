// Build-time switches. wrangler's `define` replaces __DEV_FEATURES__ per environment
// (staging/production set it to false); nothing defines it under vitest, hence `typeof`.
//
// To drop dev-only code (the dev token route, the sandbox payment provider) from a
// deployable bundle, guard it with the expression itself, not with DEV_FEATURES:
//
//   if (typeof __DEV_FEATURES__ === 'undefined' || __DEV_FEATURES__) { ... }
//
// esbuild folds a define only where the identifier appears, not through an import, so only
// the inline form becomes `if (false)`; the unreferenced module then disappears from the
// bundle (package.json declares the project free of import side effects).
// test/node/deploy-build.e2e.test.ts checks the production bundle for leftovers.
declare global {
  const __DEV_FEATURES__: boolean | undefined;
}

/** True in local builds and tests; false in staging and production bundles. For runtime checks only. */
export const DEV_FEATURES: boolean = typeof __DEV_FEATURES__ === 'undefined' || __DEV_FEATURES__;
