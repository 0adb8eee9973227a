//! End-to-end tests (one binary): the real `onestep` binary, real components, real databases.
