/**
 * Blob service SAS addresses of a store that holds the account key: {@link presignGet} (read) and
 * {@link presignPut} (create), and how a store tells it holds that key.
 * @module
 */
import {
  BlobSASPermissions,
  generateBlobSASQueryParameters,
  SASProtocol,
  StorageSharedKeyCredential,
  type ContainerClient,
} from '@azure/storage-blob'
import { isActiveContent, storeFailure, type PresignedPut, type PresignGetOptions, type PresignPutOptions } from 'attach-storage/store-kit'
import { SAFE_TYPE } from './blob-headers.js'
import { firstLine } from './sdk-errors.js'
import { connectionParts } from './settings.js'

/** The longest validity {@link AzureBlobStore.presignGet} signs (what the core's `redirect-ttl` allows). */
const MAX_PRESIGN_SECONDS = 7 * 24 * 3600
/** How far back a SAS starts, so that a service clock slightly behind ours accepts it at once. */
const SAS_CLOCK_SKEW_MS = 60_000

/** What the signing uses of an {@link AzureBlobStore}. */
export interface SasSigner {
  readonly name: string
  readonly container: string
  /** The key normalized, under the store's prefix (throws `bad-key`). */
  blobName(key: string): string
  /** The container client, created on first use. */
  getClient(): ContainerClient
  /** The container client, once the container exists (with `createContainer`). */
  ready(operation: string, key: string): Promise<ContainerClient>
  /** `store-name: operation of "key"` for messages. */
  label(operation: string, key: string): string
  /** Removes every secret, and any SAS signature, from a text. */
  redact(text: string): string
}

export async function presignGet(signer: SasSigner, key: string, options: PresignGetOptions): Promise<string> {
  const name = signer.blobName(key)
  const expiresIn = Math.floor(options.expiresIn)
  if (!(expiresIn >= 1 && expiresIn <= MAX_PRESIGN_SECONDS)) {
    throw new RangeError(
      `Azure store "${signer.name}": presignGet() expiresIn must be 1 to ${MAX_PRESIGN_SECONDS} seconds, not ${options.expiresIn}`,
    )
  }
  const blob = signer.getClient().getBlobClient(name)
  const credential = blob.credential
  if (!isSharedKey(credential)) {
    throw storeFailure(`${signer.label('presignGet', key)} failed: the store's credential cannot sign (no account key)`)
  }
  const now = Date.now()
  try {
    const sas = generateBlobSASQueryParameters(
      {
        containerName: signer.container,
        blobName: name,
        permissions: BlobSASPermissions.parse('r'),
        startsOn: new Date(now - SAS_CLOCK_SKEW_MS),
        expiresOn: new Date(now + expiresIn * 1000),
        protocol: new URL(blob.url).protocol === 'http:' ? SASProtocol.HttpsAndHttp : SASProtocol.Https,
        contentType: options.contentType,
        contentDisposition: options.contentDisposition,
      },
      credential,
    )
    return `${blob.url}?${sas.toString()}`
  } catch (err) {
    throw storeFailure(signer.redact(`${signer.label('presignGet', key)} failed: ${firstLine((err as Error)?.message)}`))
  }
}

export async function presignPut(signer: SasSigner, key: string, options: PresignPutOptions): Promise<PresignedPut> {
  const name = signer.blobName(key)
  const expiresIn = Math.floor(options.expiresIn)
  if (!(expiresIn >= 1 && expiresIn <= MAX_PRESIGN_SECONDS)) {
    throw new RangeError(
      `Azure store "${signer.name}": presignPut() expiresIn must be 1 to ${MAX_PRESIGN_SECONDS} seconds, not ${options.expiresIn}`,
    )
  }
  // The client writes into the container: with `create-container`, it must exist before the address is answered.
  const blob = (await signer.ready('presignPut', key)).getBlobClient(name)
  const credential = blob.credential
  if (!isSharedKey(credential)) {
    throw storeFailure(`${signer.label('presignPut', key)} failed: the store's credential cannot sign (no account key)`)
  }
  const now = Date.now()
  try {
    const sas = generateBlobSASQueryParameters(
      {
        containerName: signer.container,
        blobName: name,
        // Create only: no write over an existing blob, so once the committed upload left its
        // tombstone at the key, the address writes nothing more.
        permissions: BlobSASPermissions.parse('c'),
        startsOn: new Date(now - SAS_CLOCK_SKEW_MS),
        expiresOn: new Date(now + expiresIn * 1000),
        protocol: new URL(blob.url).protocol === 'http:' ? SASProtocol.HttpsAndHttp : SASProtocol.Https,
      },
      credential,
    )
    // A SAS cannot bind request headers: these are what a well-behaved client sends (the blob's type,
    // never active content, and a download disposition); the commit never trusts them.
    const type = options.contentType && !isActiveContent(options.contentType) ? options.contentType : SAFE_TYPE
    const headers: Record<string, string> = {
      'x-ms-blob-type': 'BlockBlob',
      'x-ms-blob-content-type': type,
      'x-ms-blob-content-disposition': 'attachment',
    }
    return { url: `${blob.url}?${sas.toString()}`, method: 'PUT', headers }
  } catch (err) {
    throw storeFailure(signer.redact(`${signer.label('presignPut', key)} failed: ${firstLine((err as Error)?.message)}`))
  }
}

/**
 * A credential that holds the account key (a `StorageSharedKeyCredential`, also one of another copy of
 * the SDK: what `generateBlobSASQueryParameters` uses of it).
 */
export function isSharedKey(credential: unknown): credential is StorageSharedKeyCredential {
  const c = credential as Partial<StorageSharedKeyCredential> | null | undefined
  return (
    credential instanceof StorageSharedKeyCredential || (typeof c?.accountName === 'string' && typeof c.computeHMACSHA256 === 'function')
  )
}

/** A connection string whose account key can sign a SAS (an account one, or Azurite's development one). */
export function holdsAccountKey(connectionString: string): boolean {
  return connectionString.startsWith('UseDevelopmentStorage=true') || !!connectionParts(connectionString).get('AccountKey')
}
