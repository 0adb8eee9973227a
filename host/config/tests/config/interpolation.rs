//! interpolation
