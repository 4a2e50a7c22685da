/**
 * Running a command to its end and collecting what it says, the one way for the scripts and the tests
 * that drive them: scripts/check-packages.mjs runs npm, node and the linters through it, and
 * examples/adapters-test/test/packages.test.ts runs check-packages.mjs itself.
 */
import { spawn } from 'node:child_process'

/**
 * Runs `command` with `args` (no shell), its stdin closed; resolves with its exit code and its stdout
 * and stderr interleaved as they came. Never rejects: a command that cannot start answers code -1 with
 * the error's message, one that outlives `timeout` ms (default 5 minutes) is killed with SIGKILL and
 * answers code -1 at its exit, with `killed by SIGKILL` at the end of its output (the processes it
 * started are not waited for). `env` is added to this process's environment.
 *
 * @param {string} command
 * @param {readonly string[]} args
 * @param {{ cwd?: string, env?: Record<string, string>, timeout?: number }} [options]
 * @returns {Promise<{ code: number, output: string }>}
 */
export function run(command, args, options = {}) {
  return new Promise((done) => {
    const child = spawn(command, args, {
      cwd: options.cwd,
      env: { ...process.env, ...options.env },
      stdio: ['ignore', 'pipe', 'pipe'],
    })
    let output = ''
    child.stdout.on('data', (d) => (output += d))
    child.stderr.on('data', (d) => (output += d))
    let timedOut = false
    const timer = setTimeout(() => {
      timedOut = true
      child.kill('SIGKILL')
    }, options.timeout ?? 300_000)
    child.on('error', (error) => {
      clearTimeout(timer)
      done({ code: -1, output: `${output}\n${error.message}` })
    })
    // Killed for its time: answered at its exit, since what it started (npm's `sh -c`, tsup) may live on
    // holding the pipes, and 'close' would wait for them.
    child.on('exit', (_code, signal) => {
      if (timedOut) done({ code: -1, output: `${output}\nkilled by ${signal} after ${options.timeout ?? 300_000} ms` })
    })
    child.on('close', (code, signal) => {
      clearTimeout(timer)
      done({ code: code ?? -1, output: signal ? `${output}\nkilled by ${signal}` : output })
    })
  })
}
