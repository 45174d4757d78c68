//! A tenant's settings under `/settings/…` (admin, journaled), one document per name:
//! [`mcp`] — how `/mcp` binds the calls of clients that cannot echo their grant, and which
//! names it lists tools under.

pub mod mcp;
