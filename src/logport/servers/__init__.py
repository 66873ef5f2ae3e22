"""asyncio server adapters around the sans-IO protocol cores, one module per protocol."""
