"""Remote sandbox providers: sandboxes on a service reached over its official SDK.

`common` holds what they share (labels, the service's timeout, caps, retries, orphan
reaping, the warm pool, output caps); each provider module (`e2b`, `daytona`,
`opensandbox`, `modal`, `kubernetes`, `ecs`) is one `RemoteBackend` on it; `shell` holds
the shell pieces of those whose exec API lacks stdin, a kill or file transfer.
Provider modules import their SDK only when a sandbox is first made.
"""
