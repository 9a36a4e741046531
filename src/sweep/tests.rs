//! Tests of a whole sweep file: loading, points, errors.
