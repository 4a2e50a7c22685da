/**
 * Debian's Chromium as every browser test and script starts it: the binary, and the flags that keep it
 * headless and off the network (this machine's closed network refuses its background connections, many
 * at a time, without them).
 */
export const CHROMIUM_PATH = '/usr/bin/chromium'

export const CHROMIUM_ARGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
]
