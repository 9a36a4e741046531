//! The requests a service receives: when each arrives (a Poisson or gamma
//! process at a rate, a trace's timestamps, a fixed list of times) and how
//! many prompt and output tokens it carries (fixed, drawn from a
//! distribution, or a trace's), all drawn from one generator seeded by the
//! user, so that the same seed gives the same requests. Knows nothing of
//! scheduling or hardware.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use rand::rngs::Xoshiro256PlusPlus;
use rand::{RngExt, SeedableRng};
use serde::Deserialize;

use crate::units::Time;

/// One request: when it arrives, its prompt, and how many tokens it
/// generates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    pub arrival: Time,
    pub prompt: u64,
    pub output: u64,
}

/// When requests arrive.
#[derive(Debug, Clone, PartialEq)]
pub enum Arrivals {
    /// Gaps drawn from a gamma distribution of mean 1/`rate` and
    /// coefficient of variation `burstiness` (1: a Poisson process; above
    /// 1, bursts and lulls; below, more regular).
    Rate { per_second: f64, burstiness: f64 },
    /// At these times, in order.
    At(Vec<Time>),
}

impl Arrivals {
    /// Checks the rate and burstiness; the error names the flag.
    pub fn rate(per_second: f64, burstiness: f64) -> Result<Arrivals, RequestError> {
        if !(per_second.is_finite() && per_second > 0.0) {
            return Err(RequestError::Invalid { key: "--rate", message: format!("{per_second}: give requests a second, above 0") });
        }
        if !(burstiness.is_finite() && (0.01..=100.0).contains(&burstiness)) {
            return Err(RequestError::Invalid {
                key: "--burstiness",
                message: format!("{burstiness}: give the gaps' coefficient of variation, from 0.01 to 100 (1 is Poisson)"),
            });
        }
        Ok(Arrivals::Rate { per_second, burstiness })
    }

    /// The rate they arrive at, where they come at one.
    pub fn per_second(&self) -> Option<f64> {
        match self {
            Arrivals::Rate { per_second, .. } => Some(*per_second),
            Arrivals::At(_) => None,
        }
    }

    /// `count` requests arriving together, as `vllm bench serve` sends
    /// them at its default rate: a client cap decides when each is sent.
    pub fn all_at_once(count: usize) -> Arrivals {
        Arrivals::At(vec![Time::ZERO; count])
    }

    /// Arrival times in seconds, as listed (sorted; the earliest need not
    /// be 0).
    pub fn at_seconds(seconds: &[f64], key: &'static str) -> Result<Arrivals, RequestError> {
        let mut times = Vec::with_capacity(seconds.len());
        for &s in seconds {
            if !(s.is_finite() && (0.0..=MAX_SECONDS).contains(&s)) {
                return Err(RequestError::Invalid { key, message: format!("{s}: give seconds from 0 to {MAX_SECONDS}") });
            }
            times.push(seconds_to_time(s));
        }
        times.sort();
        Ok(Arrivals::At(times))
    }
}

/// The latest arrival a file, a list or a rate may give: 100 days, well
/// inside the simulated clock's range (about 213 days of picoseconds).
pub const MAX_SECONDS: f64 = 100.0 * 86400.0;

fn seconds_to_time(seconds: f64) -> Time {
    Time::from_us_f64(seconds * 1e6)
}

/// A length in tokens: fixed, or drawn for each request.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Length {
    Fixed(u64),
    /// Uniform over `low..=high`.
    Uniform {
        low: u64,
        high: u64,
    },
    /// Log-normal of this mean and coefficient of variation, rounded to a
    /// whole token, at least 1.
    LogNormal {
        mean: f64,
        cv: f64,
    },
}

impl FromStr for Length {
    type Err = String;
    fn from_str(text: &str) -> Result<Length, String> {
        let allowed = "give N, LOW..HIGH (uniform) or lognormal:MEAN,CV, in tokens of at least 1";
        let whole = |t: &str| t.trim().parse::<u64>().ok().filter(|&n| n >= 1);
        if let Some(n) = whole(text) {
            return Ok(Length::Fixed(n));
        }
        if let Some((low, high)) = text.split_once("..") {
            return match (whole(low), whole(high)) {
                (Some(low), Some(high)) if low <= high => Ok(Length::Uniform { low, high }),
                _ => Err(format!("{text:?}: {allowed}, LOW no more than HIGH")),
            };
        }
        if let Some(rest) = text.strip_prefix("lognormal:")
            && let Some((mean, cv)) = rest.split_once(',')
            && let (Ok(mean), Ok(cv)) = (mean.trim().parse::<f64>(), cv.trim().parse::<f64>())
        {
            if mean.is_finite() && mean >= 1.0 && cv.is_finite() && (0.0..=10.0).contains(&cv) {
                return Ok(Length::LogNormal { mean, cv });
            }
            return Err(format!("{text:?}: the mean must be 1 or more and the CV from 0 to 10"));
        }
        Err(format!("{text:?}: {allowed}"))
    }
}

impl fmt::Display for Length {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Length::Fixed(n) => write!(f, "{n}"),
            Length::Uniform { low, high } => write!(f, "{low}..{high}"),
            Length::LogNormal { mean, cv } => write!(f, "lognormal:{mean},{cv}"),
        }
    }
}

impl Length {
    fn draw(self, rng: &mut Xoshiro256PlusPlus) -> u64 {
        match self {
            Length::Fixed(n) => n,
            Length::Uniform { low, high } => rng.random_range(low..=high),
            Length::LogNormal { mean, cv } => {
                let sigma2 = (1.0 + cv * cv).ln();
                let mu = mean.ln() - sigma2 / 2.0;
                let drawn = (mu + sigma2.sqrt() * standard_normal(rng)).exp();
                // Far beyond any context: the service refuses it by name.
                drawn.round().clamp(1.0, u64::MAX as f64 / 4.0) as u64
            }
        }
    }
}

/// How long requests are.
#[derive(Debug, Clone, PartialEq)]
pub enum Lengths {
    Drawn {
        prompt: Length,
        output: Length,
    },
    /// (prompt, output) of each request in order, from the start again
    /// when more requests are asked for.
    Listed(Vec<(u64, u64)>),
}

/// `count` requests arriving as `arrivals` says (no more than it lists),
/// of `lengths`, drawn from a generator seeded with `seed`; the first
/// arrives at time 0.
pub fn generate(arrivals: &Arrivals, lengths: &Lengths, count: usize, seed: u64) -> Vec<Request> {
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
    let times: Vec<Time> = match arrivals {
        Arrivals::At(times) => {
            let first = times.first().copied().unwrap_or(Time::ZERO);
            times.iter().take(count).map(|&t| t - first).collect()
        }
        Arrivals::Rate { per_second, burstiness } => {
            let shape = 1.0 / (burstiness * burstiness);
            let scale = 1.0 / (per_second * shape);
            let mut at = 0.0;
            (0..count)
                .map(|index| {
                    if index > 0 {
                        at += gamma(shape, &mut rng) * scale;
                    }
                    seconds_to_time(at)
                })
                .collect()
        }
    };
    times
        .into_iter()
        .enumerate()
        .map(|(index, arrival)| {
            let (prompt, output) = match lengths {
                Lengths::Drawn { prompt, output } => (prompt.draw(&mut rng), output.draw(&mut rng)),
                Lengths::Listed(rows) => rows[index % rows.len()],
            };
            Request { arrival, prompt, output }
        })
        .collect()
}

/// A uniform draw in (0, 1].
fn unit_open_below(rng: &mut Xoshiro256PlusPlus) -> f64 {
    1.0 - rng.random::<f64>()
}

/// A standard normal draw (Box and Muller's transform).
fn standard_normal(rng: &mut Xoshiro256PlusPlus) -> f64 {
    let (u, v) = (unit_open_below(rng), rng.random::<f64>());
    (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
}

/// A gamma draw of `shape` and scale 1 (Marsaglia and Tsang's method; a
/// shape below 1 boosted by a uniform draw's power).
fn gamma(shape: f64, rng: &mut Xoshiro256PlusPlus) -> f64 {
    if shape < 1.0 {
        return gamma(shape + 1.0, rng) * unit_open_below(rng).powf(1.0 / shape);
    }
    let d = shape - 1.0 / 3.0;
    let c = 1.0 / (9.0 * d).sqrt();
    loop {
        let x = standard_normal(rng);
        let v = (1.0 + c * x).powi(3);
        if v <= 0.0 {
            continue;
        }
        if unit_open_below(rng).ln() < 0.5 * x * x + d - d * v + d * v.ln() {
            return d * v;
        }
    }
}

/// Why requests cannot be made: a flag's value or a trace file.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    #[error("{key} {message}")]
    Invalid { key: &'static str, message: String },
    #[error("cannot read trace {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("trace {path}, {place}: {message}")]
    Trace { path: PathBuf, place: String, message: String },
}

/// A trace's timestamps' unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeUnit {
    Seconds,
    Milliseconds,
}

impl FromStr for TimeUnit {
    type Err = String;
    fn from_str(text: &str) -> Result<TimeUnit, String> {
        match text {
            "s" => Ok(TimeUnit::Seconds),
            "ms" => Ok(TimeUnit::Milliseconds),
            other => Err(format!("unknown unit {other:?}: use s or ms")),
        }
    }
}

/// Characters of English text a token stands for, to count the tokens of
/// a conversation given as text: OpenAI's rule of thumb ("one token
/// generally corresponds to ~4 characters of text for common English
/// text", in its tokenizer's help), not a tokenizer.
const CHARACTERS_PER_TOKEN: u64 = 4;

/// One row of a trace as written. Other fields (ids, hashes) are
/// ignored: traces carry many.
#[derive(Debug, Deserialize)]
struct RawTraceRow {
    #[serde(default, alias = "arrival", alias = "arrival_time")]
    timestamp: Option<f64>,
    #[serde(default, alias = "input_length", alias = "input_len", alias = "prompt_len")]
    prompt_tokens: Option<u64>,
    #[serde(default, alias = "output_length", alias = "output_len")]
    output_tokens: Option<u64>,
    /// A ShareGPT conversation: the first turn is the prompt, the second
    /// the reply.
    #[serde(default)]
    conversations: Option<Vec<Turn>>,
    /// A prompt as text (vLLM's custom dataset rows), with `output_tokens`.
    #[serde(default)]
    prompt: Option<String>,
}

/// What `vllm bench serve --save-result` writes: the lengths each request
/// sent and got, in order, and how the benchmark sent them (other fields
/// ignored).
#[derive(Debug, Deserialize)]
struct BenchResult {
    input_lens: Vec<u64>,
    output_lens: Vec<u64>,
    /// Requests a second, or `"inf"`: all at once.
    #[serde(default)]
    request_rate: Option<serde_json::Value>,
    #[serde(default)]
    burstiness: Option<f64>,
    #[serde(default)]
    max_concurrency: Option<u64>,
    /// Set where the benchmark raised its rate over the run.
    #[serde(default)]
    ramp_up_strategy: Option<String>,
}

/// How a vLLM benchmark sent its requests, as its result file records it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BenchmarkLoad {
    /// Requests a second; None: all at once (`"inf"`).
    pub rate: Option<f64>,
    pub burstiness: f64,
    pub max_concurrency: Option<u64>,
    /// Whether it ramped its rate up over the run, which icsim does not.
    pub ramped: bool,
}

#[derive(Debug, Deserialize)]
struct Turn {
    value: String,
}

/// What a trace file gives.
#[derive(Debug, Clone, PartialEq)]
pub struct Trace {
    /// When each row arrives, where every row has a timestamp.
    pub arrivals: Option<Arrivals>,
    pub lengths: Lengths,
    /// ShareGPT conversations whose tokens were counted from their text.
    pub estimated: usize,
    /// Rows left out: conversations of one turn, requests that failed in
    /// a benchmark.
    pub skipped: usize,
    /// How the benchmark whose result this is sent its requests, where the
    /// file says (`vllm bench serve --save-result` since it records it).
    pub benchmark: Option<BenchmarkLoad>,
}

/// Reads a trace: JSON Lines, or a JSON array, of objects with a
/// `timestamp` (in `unit`; optional in every row or none), the prompt's
/// tokens (`prompt_tokens`, `input_length`, `input_len` or `prompt_len`)
/// and the output's (`output_tokens`, `output_length` or `output_len`),
/// or a ShareGPT `conversations` list whose first two turns' text is
/// counted at four characters a token (as is a `prompt` given as text);
/// or the result `vllm bench serve --save-result` writes (its
/// `input_lens` and `output_lens`, without times).
pub fn read_trace(path: &Path, unit: TimeUnit) -> Result<Trace, RequestError> {
    let text = std::fs::read_to_string(path).map_err(|source| RequestError::Io { path: path.to_path_buf(), source })?;
    parse_trace(path, &text, unit)
}

/// [`read_trace`] of `text`, read from `path`.
pub fn parse_trace(path: &Path, text: &str, unit: TimeUnit) -> Result<Trace, RequestError> {
    let fail = |place: String, message: String| RequestError::Trace { path: path.to_path_buf(), place, message };
    if let Ok(result) = serde_json::from_str::<BenchResult>(text) {
        return bench_result_lengths(result).map_err(|message| fail("the benchmark's result".into(), message));
    }
    let rows: Vec<(String, RawTraceRow)> = if text.trim_start().starts_with('[') {
        let rows: Vec<RawTraceRow> = serde_json::from_str(text).map_err(|e| fail("the array".into(), e.to_string()))?;
        rows.into_iter().enumerate().map(|(index, row)| (format!("entry {index}"), row)).collect()
    } else {
        let mut rows = Vec::new();
        for (index, line) in text.lines().enumerate().filter(|(_, line)| !line.trim().is_empty()) {
            let place = format!("line {}", index + 1);
            rows.push((place.clone(), serde_json::from_str(line).map_err(|e| fail(place, e.to_string()))?));
        }
        rows
    };
    let scale = match unit {
        TimeUnit::Seconds => 1.0,
        TimeUnit::Milliseconds => 1e-3,
    };
    let (mut lengths, mut times) = (Vec::with_capacity(rows.len()), Vec::with_capacity(rows.len()));
    let (mut estimated, mut skipped) = (0, 0);
    let timed = rows.first().is_some_and(|(_, row)| row.timestamp.is_some());
    for (place, row) in rows {
        if row.timestamp.is_some() != timed {
            return Err(fail(place, "give a timestamp in every row or in none".into()));
        }
        let pair = match (row.prompt_tokens, row.output_tokens, &row.conversations, &row.prompt) {
            (Some(prompt), Some(output), None, None) => (prompt, output),
            (None, None, Some(turns), None) => {
                let [prompt, reply, ..] = &turns[..] else {
                    skipped += 1;
                    continue;
                };
                estimated += 1;
                (tokens_of(&prompt.value), tokens_of(&reply.value))
            }
            (None, Some(output), None, Some(text)) => {
                estimated += 1;
                (tokens_of(text), output)
            }
            _ => {
                return Err(fail(
                    place,
                    "give prompt_tokens and output_tokens (or input_length and output_length), a prompt's text and output_tokens, or a ShareGPT conversations list".into(),
                ));
            }
        };
        if pair.0 == 0 || pair.1 == 0 {
            return Err(fail(place, format!("{} prompt and {} output tokens: each needs at least 1", pair.0, pair.1)));
        }
        lengths.push(pair);
        if let Some(seconds) = row.timestamp {
            let seconds = seconds * scale;
            if !(seconds.is_finite() && (0.0..=MAX_SECONDS).contains(&seconds)) {
                return Err(fail(place, format!("timestamp {seconds} s: give seconds from 0 to {MAX_SECONDS}")));
            }
            times.push(seconds_to_time(seconds));
        }
    }
    if lengths.is_empty() {
        return Err(fail("the file".into(), "no request in it".into()));
    }
    // A trace's rows in arrival order, each keeping its lengths.
    let arrivals = timed.then(|| {
        let mut order: Vec<usize> = (0..times.len()).collect();
        order.sort_by_key(|&i| times[i]);
        lengths = order.iter().map(|&i| lengths[i]).collect();
        Arrivals::At(order.iter().map(|&i| times[i]).collect())
    });
    Ok(Trace { arrivals, lengths: Lengths::Listed(lengths), estimated, skipped, benchmark: None })
}

/// Tokens of `text` at [`CHARACTERS_PER_TOKEN`].
fn tokens_of(text: &str) -> u64 {
    (text.chars().count() as u64).div_ceil(CHARACTERS_PER_TOKEN)
}

/// The lengths a vLLM benchmark sent and got, request by request, and how
/// it sent them.
fn bench_result_lengths(result: BenchResult) -> Result<Trace, String> {
    let rate = match &result.request_rate {
        None => None,
        Some(serde_json::Value::String(text)) if text == "inf" => Some(None),
        Some(serde_json::Value::Number(n)) if n.as_f64().is_some_and(|r| r.is_finite() && r > 0.0) => Some(n.as_f64()),
        Some(other) => return Err(format!("request_rate {other}: requests a second above 0, or \"inf\"")),
    };
    let burstiness = result.burstiness.unwrap_or(1.0);
    if !(burstiness.is_finite() && burstiness > 0.0) {
        return Err(format!("burstiness {burstiness}: a coefficient of variation above 0"));
    }
    if result.max_concurrency == Some(0) {
        return Err("max_concurrency 0: at least one request in flight".into());
    }
    let benchmark = rate.map(|rate| BenchmarkLoad {
        rate,
        burstiness,
        max_concurrency: result.max_concurrency,
        ramped: result.ramp_up_strategy.is_some(),
    });
    if result.input_lens.len() != result.output_lens.len() || result.input_lens.is_empty() {
        return Err(format!(
            "input_lens and output_lens: {} and {} entries: give as many of each, at least one",
            result.input_lens.len(),
            result.output_lens.len()
        ));
    }
    let sent = result.input_lens.len();
    // A request that failed in the benchmark got no output: left out.
    let rows: Vec<(u64, u64)> = result.input_lens.into_iter().zip(result.output_lens).filter(|&(i, o)| i > 0 && o > 0).collect();
    if rows.is_empty() {
        return Err("input_lens and output_lens: no request with both a prompt and an output".into());
    }
    Ok(Trace { arrivals: None, skipped: sent - rows.len(), lengths: Lengths::Listed(rows), estimated: 0, benchmark })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mean_and_cv(gaps: &[f64]) -> (f64, f64) {
        let mean = gaps.iter().sum::<f64>() / gaps.len() as f64;
        let variance = gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / gaps.len() as f64;
        (mean, variance.sqrt() / mean)
    }

    fn gaps(requests: &[Request]) -> Vec<f64> {
        requests.windows(2).map(|w| (w[1].arrival - w[0].arrival).as_secs()).collect()
    }

    #[test]
    fn arrivals_have_the_rate_and_burstiness_asked_for() {
        let fixed = Lengths::Drawn { prompt: Length::Fixed(10), output: Length::Fixed(5) };
        for burstiness in [1.0, 0.5, 3.0] {
            let arrivals = Arrivals::rate(20.0, burstiness).unwrap();
            let requests = generate(&arrivals, &fixed, 40_000, 7);
            let (mean, cv) = mean_and_cv(&gaps(&requests));
            assert!((mean * 20.0 - 1.0).abs() < 0.03, "burstiness {burstiness}: mean gap {mean}");
            assert!((cv / burstiness - 1.0).abs() < 0.05, "burstiness {burstiness}: cv {cv}");
            assert_eq!(requests[0].arrival, Time::ZERO);
        }
    }

    #[test]
    fn the_same_seed_gives_the_same_requests_and_another_seed_others() {
        let arrivals = Arrivals::rate(5.0, 2.0).unwrap();
        let lengths = Lengths::Drawn { prompt: "lognormal:800,1.5".parse().unwrap(), output: "10..300".parse().unwrap() };
        let one = generate(&arrivals, &lengths, 500, 1);
        assert_eq!(one, generate(&arrivals, &lengths, 500, 1));
        assert_ne!(one, generate(&arrivals, &lengths, 500, 2));
        assert!(one.iter().all(|r| r.prompt >= 1 && (10..=300).contains(&r.output)));
        let (mean, cv) = mean_and_cv(&one.iter().map(|r| r.prompt as f64).collect::<Vec<_>>());
        assert!((mean / 800.0 - 1.0).abs() < 0.2 && (cv / 1.5 - 1.0).abs() < 0.4, "lognormal prompts: {mean} {cv}");
    }

    #[test]
    fn lengths_parse_or_say_what_is_allowed() {
        assert_eq!("512".parse::<Length>(), Ok(Length::Fixed(512)));
        assert_eq!("1..8".parse::<Length>(), Ok(Length::Uniform { low: 1, high: 8 }));
        for bad in ["0", "8..1", "lognormal:0,1", "normal:5,1", "x"] {
            let error = bad.parse::<Length>().unwrap_err();
            assert!(error.contains("give N") || error.contains("the mean"), "{bad}: {error}");
        }
    }

    #[test]
    fn traces_are_read_as_jsonl_json_arrays_and_sharegpt() {
        let path = Path::new("t.jsonl");
        let jsonl = "{\"timestamp\": 2.0, \"input_length\": 30, \"output_length\": 4, \"hash_ids\": [1]}\n\n{\"timestamp\": 1.5, \"prompt_tokens\": 10, \"output_tokens\": 2}\n";
        let trace = parse_trace(path, jsonl, TimeUnit::Seconds).unwrap();
        assert_eq!(trace.lengths, Lengths::Listed(vec![(10, 2), (30, 4)]), "sorted by arrival");
        let requests = generate(trace.arrivals.as_ref().unwrap(), &trace.lengths, 10, 0);
        assert_eq!(requests.iter().map(|r| r.arrival).collect::<Vec<_>>(), vec![Time::ZERO, Time::from_us(500_000)]);
        let ms = parse_trace(path, "{\"timestamp\": 1500, \"input_length\": 3, \"output_length\": 1}", TimeUnit::Milliseconds).unwrap();
        assert_eq!(ms.arrivals, Some(Arrivals::At(vec![Time::from_us(1_500_000)])));
        let sharegpt = r#"[{"id": "a", "conversations": [{"from": "human", "value": "abcdefgh"}, {"from": "gpt", "value": "abcde"}]},
                           {"id": "b", "conversations": [{"from": "human", "value": "alone"}]}]"#;
        let trace = parse_trace(path, sharegpt, TimeUnit::Seconds).unwrap();
        assert_eq!((trace.lengths, trace.arrivals, trace.estimated, trace.skipped), (Lengths::Listed(vec![(2, 2)]), None, 1, 1));
    }

    #[test]
    fn a_vllm_benchmark_result_gives_its_lengths_and_custom_rows_their_text() {
        let path = Path::new("result.json");
        let result =
            r#"{"duration": 10.0, "completed": 2, "input_lens": [100, 7, 50], "output_lens": [20, 0, 5], "ttfts": [0.1, 0.0, 0.2]}"#;
        let trace = parse_trace(path, result, TimeUnit::Seconds).unwrap();
        assert_eq!((trace.lengths, trace.arrivals, trace.skipped), (Lengths::Listed(vec![(100, 20), (50, 5)]), None, 1));
        let error = parse_trace(path, r#"{"input_lens": [1, 2], "output_lens": [3]}"#, TimeUnit::Seconds).unwrap_err().to_string();
        assert!(error.contains("input_lens and output_lens") && error.contains("as many"), "{error}");
        let custom = parse_trace(path, "{\"prompt\": \"abcdefghi\", \"output_tokens\": 3}", TimeUnit::Seconds).unwrap();
        assert_eq!((custom.lengths, custom.estimated), (Lengths::Listed(vec![(3, 3)]), 1));
    }

    #[test]
    fn a_vllm_benchmark_result_says_how_it_sent_its_requests() {
        let path = Path::new("result.json");
        let with = |traffic: &str| parse_trace(path, &format!(r#"{{"input_lens": [10], "output_lens": [5]{traffic}}}"#), TimeUnit::Seconds);
        let load = |traffic: &str| with(traffic).unwrap().benchmark;
        assert_eq!(load(""), None, "an older result records no traffic");
        let capped = load(r#", "request_rate": "inf", "burstiness": 1.0, "max_concurrency": 16"#);
        assert_eq!(capped, Some(BenchmarkLoad { rate: None, burstiness: 1.0, max_concurrency: Some(16), ramped: false }));
        let rated = load(r#", "request_rate": 4.5, "burstiness": 2.0, "max_concurrency": null, "ramp_up_strategy": "linear""#);
        assert_eq!(rated, Some(BenchmarkLoad { rate: Some(4.5), burstiness: 2.0, max_concurrency: None, ramped: true }));
        for (traffic, named) in [
            (r#", "request_rate": "fast""#, "request_rate"),
            (r#", "request_rate": 0"#, "request_rate"),
            (r#", "request_rate": 1, "burstiness": -1"#, "burstiness"),
            (r#", "request_rate": 1, "max_concurrency": 0"#, "max_concurrency"),
        ] {
            let error = with(traffic).unwrap_err().to_string();
            assert!(error.contains("result.json") && error.contains(named), "{traffic}: {error}");
        }
    }

    #[test]
    fn bad_trace_rows_are_named_by_line() {
        let path = Path::new("t.jsonl");
        let error = |text: &str| parse_trace(path, text, TimeUnit::Seconds).unwrap_err().to_string();
        let e = error("{\"prompt_tokens\": 1, \"output_tokens\": 1}\n{\"prompt_tokens\": 5}\n");
        assert!(e.contains("line 2") && e.contains("output_tokens"), "{e}");
        let e = error("{\"timestamp\": 1, \"prompt_tokens\": 1, \"output_tokens\": 1}\n{\"prompt_tokens\": 1, \"output_tokens\": 1}");
        assert!(e.contains("line 2") && e.contains("every row or in none"), "{e}");
        let e = error("{\"prompt_tokens\": 0, \"output_tokens\": 1}");
        assert!(e.contains("line 1") && e.contains("at least 1"), "{e}");
        assert!(error("{nope").contains("line 1"));
        let e = error("[{\"prompt_tokens\": 1, \"output_tokens\": 1}, {\"prompt_tokens\": \"many\", \"output_tokens\": 1}]");
        assert!(e.contains("the array") && e.contains("column"), "{e}");
        assert!(error("[{\"prompt_tokens\": 1}]").contains("entry 0"));
        assert!(error("").contains("no request"));
    }
}
