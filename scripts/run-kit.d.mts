/** Types of run-kit.mjs for the TypeScript tests that import it. */
export interface RunOptions {
  /** The working directory (default: this process's). */
  cwd?: string
  /** Added to this process's environment. */
  env?: Record<string, string>
  /** Killed with SIGKILL after this many milliseconds (default 300,000). */
  timeout?: number
}
export interface RunResult {
  /** The exit code; -1 when the command could not start or was killed. */
  code: number
  /** stdout and stderr, interleaved as they came. */
  output: string
}
export declare function run(command: string, args: readonly string[], options?: RunOptions): Promise<RunResult>
