// Workspace only (not published): loads the command's TypeScript source through tsx (a development
// dependency of the repository), with the workspace packages, store packages included, resolved to
// their sources through the `@attach-storage/source` condition.
import { register } from 'node:module'

export async function loadSource() {
  const { register: registerTsx } = await import('tsx/esm/api')
  registerTsx()
  // Registered last, so it runs first: adds the source condition to every resolution.
  const hook = `export async function resolve(specifier, context, next) {
    return next(specifier, { ...context, conditions: [...context.conditions, '@attach-storage/source'] })
  }`
  register(`data:text/javascript,${encodeURIComponent(hook)}`)
  return import(new URL('../src/cli/main.ts', import.meta.url).href)
}
