import type { ContainerClient } from '@azure/storage-blob'
import { defineStoreSettings, setting, settingsError, type StoreSettingsOutput } from 'attach-storage/store-kit'

const KiB = 1024
const MiB = 1024 * KiB

/**
 * Settings of {@link AzureBlobStore}: the `attach.stores.<name>` settings of a store of type `azure`
 * (kebab-case in a configuration file, camelCase here).
 *
 * Durations are a number of seconds or a string with its unit (`'500ms'`, `'30s'`, `'10m'`); sizes are a
 * number of bytes or a string with its unit (`'4MB'`, `'512KB'`).
 *
 * @example
 * new AzureBlobStore('az', {
 *   connectionString: process.env.AZURE_STORAGE_CONNECTION_STRING,
 *   container: 'attachments',
 *   prefix: 'prod/',
 * })
 */
export interface AzureBlobStoreOptions {
  /**
   * An Azure Storage connection string: an account one (`DefaultEndpointsProtocol`, `AccountName`,
   * `AccountKey`, and `EndpointSuffix` or `BlobEndpoint`), a SAS one (`BlobEndpoint`,
   * `SharedAccessSignature`), or `UseDevelopmentStorage=true` (Azurite on 127.0.0.1:10000).
   * Required unless {@link containerClient} is given. Never shown in an error message.
   */
  connectionString?: string
  /** The container's name (3-63 lowercase letters, digits and single hyphens). Required unless {@link containerClient} is given. */
  container?: string
  /**
   * A ready client of the container, for credentials a connection string cannot carry (Microsoft Entra ID
   * through `@azure/identity`, a user delegation SAS). It then takes the place of `connectionString` and
   * `container`, and the retry settings below are the client's own business.
   */
  containerClient?: ContainerClient
  /**
   * A folder inside the container that holds every object of this store (`tenant-a/`); keys are relative
   * to it and `list` answers keys without it. Its segments follow the key rules of attach-storage.
   * @default '' (the container's root)
   */
  prefix?: string
  /** Public base address of the files. Read by the core (records' `cdnUrl`), not by the store. */
  cdnUrl?: string
  /**
   * `true`: create the container on first use when it does not exist (needs the right to create
   * containers). `false`: it must exist.
   * @default false
   */
  createContainer?: boolean
  /**
   * Attempts of each request (the first one included) before an error is reported.
   * @default 3
   */
  maxTries?: number
  /**
   * Delay before the first retry; it doubles with every further one, up to {@link maxRetryDelay}.
   * At most 60 seconds.
   * @default '500ms'
   */
  retryDelay?: number | string
  /** Longest delay between two tries. At most 10 minutes. @default '5s' */
  maxRetryDelay?: number | string
  /**
   * Server-side timeout of each try (the SDK's `tryTimeoutInMs`, sent as the `timeout` query parameter);
   * unset: the service's own default. At least 1 second.
   */
  tryTimeout?: number | string
  /**
   * A streamed object up to this size goes up in one `Put Blob` request; a larger one in blocks of this
   * size (`Put Block`, then one `Put Block List` that makes it visible at once). Memory per upload is at
   * most about `blockSize × (uploadConcurrency + 1)`. Between 64 KiB and 256 MiB.
   * @default '4MB'
   */
  blockSize?: number | string
  /** Blocks of one upload sent at the same time. Between 1 and 32. @default 4 */
  uploadConcurrency?: number
  /**
   * How long a server-side copy (`move`, `copy`) may stay pending before it is aborted and reported as
   * a failure. Copies inside one account normally finish at once.
   * @default '10m'
   */
  copyTimeout?: number | string
}

/** Azure container names: 3-63 of `a-z0-9-`, starting and ending with a letter or digit, no `--`. */
const isContainerName = (name: unknown): name is string =>
  typeof name === 'string' && (name === '$root' || (/^[a-z0-9](?:[a-z0-9-]{1,61}[a-z0-9])$/.test(name) && !name.includes('--')))

const isContainerClient = (value: unknown): value is ContainerClient => {
  const c = value as Partial<ContainerClient> | null
  return (
    typeof c === 'object' &&
    c !== null &&
    typeof c.containerName === 'string' &&
    typeof c.getBlockBlobClient === 'function' &&
    typeof c.listBlobsFlat === 'function'
  )
}

/** The settings of a store of type `azure`. */
export const azureSettings = defineStoreSettings({
  type: 'azure',
  required: ['connectionString', 'container'],
  secrets: ['connectionString'],
  entries: {
    connectionString: setting.text(),
    container: setting.check(
      isContainerName,
      'must be a container name: 3-63 lowercase letters, digits and single hyphens, starting and ending with a letter or digit (or "$root")',
    ),
    containerClient: setting.check(isContainerClient, 'must be a ContainerClient of @azure/storage-blob (containerClient)'),
    prefix: setting.prefix(),
    createContainer: setting.flag(false),
    maxTries: setting.integer(1, 20, 3),
    retryDelay: setting.duration(500, { max: 60_000 }),
    maxRetryDelay: setting.duration(5_000, { max: 600_000 }),
    tryTimeout: setting.duration(undefined, { min: 1000, max: 3_600_000 }),
    blockSize: setting.size(4 * MiB, 64 * KiB, 256 * MiB),
    uploadConcurrency: setting.integer(1, 32, 4),
    copyTimeout: setting.duration(600_000, { min: 1000, max: 86_400_000 }),
  },
})

/** The validated settings of an Azure store. */
export type ResolvedAzureSettings = StoreSettingsOutput<typeof azureSettings.entries>

/** Validates the settings of Azure store `name`; throws `config-invalid` naming the setting. */
export function resolveAzureSettings(name: string, options: AzureBlobStoreOptions): ResolvedAzureSettings {
  const o = (options ?? {}) as Record<string, unknown>
  const withClient = o.containerClient !== undefined && o.containerClient !== null
  const s = azureSettings.parse(name, o, withClient ? { required: [] } : {})
  if (!withClient) checkConnectionString(name, s.connectionString!)
  if (s.maxRetryDelay < s.retryDelay) throw settingsError(name, 'maxRetryDelay', 'must not be shorter than retry-delay')
  return s
}

/** `key=value` pairs of a connection string (a value may hold `=`). */
export function connectionParts(connectionString: string): Map<string, string> {
  const parts = new Map<string, string>()
  for (const part of connectionString.split(';')) {
    const at = part.indexOf('=')
    if (at > 0) parts.set(part.slice(0, at).trim(), part.slice(at + 1).trim())
  }
  return parts
}

/** The values of a connection string that must never reach a message. */
export function secretsOf(connectionString: string | undefined): string[] {
  if (connectionString === undefined) return []
  const parts = connectionParts(connectionString)
  const secrets = [connectionString]
  for (const k of ['AccountKey', 'SharedAccessSignature']) {
    const v = parts.get(k)
    if (v) secrets.push(v)
  }
  return secrets.filter((s) => s.length >= 4)
}

/** The shapes the SDK accepts, checked up front so that a bad value fails at start with a clear message. */
function checkConnectionString(name: string, connectionString: string): void {
  const parts = connectionParts(connectionString)
  const bad = (problem: string) =>
    settingsError(
      name,
      'connectionString',
      `is not a valid Azure Storage connection string (${problem}); use ` +
        '"DefaultEndpointsProtocol=https;AccountName=…;AccountKey=…;EndpointSuffix=core.windows.net" (or BlobEndpoint=… ' +
        'instead of EndpointSuffix), "BlobEndpoint=…;SharedAccessSignature=…", or "UseDevelopmentStorage=true"',
    )
  if (connectionString.startsWith('UseDevelopmentStorage=true')) return
  const endpoint = parts.get('BlobEndpoint')
  if (endpoint !== undefined && !/^https?:\/\/[^/]/i.test(endpoint)) throw bad('BlobEndpoint is not an http(s) URL')
  if (connectionString.includes('DefaultEndpointsProtocol=') && connectionString.includes('AccountKey=')) {
    if (!parts.get('AccountName')) throw bad('AccountName is missing')
    if (!parts.get('AccountKey')) throw bad('AccountKey is empty')
    if (!endpoint) {
      const protocol = parts.get('DefaultEndpointsProtocol')?.toLowerCase()
      if (protocol !== 'https' && protocol !== 'http') throw bad('DefaultEndpointsProtocol is not https or http')
      if (!parts.get('EndpointSuffix')) throw bad('EndpointSuffix or BlobEndpoint is missing')
    }
    return
  }
  if (parts.has('AccountKey')) throw bad('an account key needs DefaultEndpointsProtocol')
  if (!endpoint) throw bad('BlobEndpoint is missing')
  if (!parts.get('SharedAccessSignature')) throw bad('neither AccountKey nor SharedAccessSignature is given')
}
