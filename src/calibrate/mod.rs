//! Calibration: the measurement schema, predicting measurements, the
//! fidelity report, fitting the hardware model, importers of other tools'
//! output, and the GPU runner. Changes no simulator logic: it only reads
//! measurements and writes model files.

pub mod clock;
pub mod fit;
pub mod predict;
pub mod runner;
pub mod schema;
pub mod validate;
