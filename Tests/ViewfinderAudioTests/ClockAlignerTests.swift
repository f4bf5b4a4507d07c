import Foundation
import Testing
import Viewfinder

/// A simulated card: periods of 480 frames whose stamps follow a clock `ppm` off nominal, with
/// ±`jitter` ns of stamp noise; clicks (a 2 ms full-scale pulse) every second of real time.
struct SimulatedCard {
    var rate = 48000
    var ppm = 0.0
    var jitter: UInt64 = 500_000
    var start: UInt64 = 5_000_000_000
    var rng = SystemRandomNumberGenerator()
    var actualRate: Double { Double(rate) * (1 + ppm / 1e6) }
    /// Monotonic time of frame `n`.
    func time(_ n: UInt64) -> UInt64 { start + UInt64(Double(n) / actualRate * 1e9) }
    /// Frame `n`: a click at each whole second of real time.
    func sample(_ n: UInt64) -> Int16 {
        let t = Double(time(n) - start) / 1e9
        return t - t.rounded(.down) < 0.002 && t >= 1 ? 30000 : 0
    }
    mutating func stamp(_ n: UInt64) -> UInt64 { time(n) &+ UInt64.random(in: 0...(2 * jitter), using: &rng) &- jitter }
}

@Suite struct ClockEstimatorTests {
    @Test func measuresACardThatRunsHalfAPercentFast() {
        var card = SimulatedCard(ppm: 5000)
        var clock = AudioClockEstimator(nominalRate: 48000)
        var n: UInt64 = 0
        while n < 48000 * 30 {
            _ = clock.add(position: n, timestampNanoseconds: card.stamp(n), discontinuity: false)
            n += 480
        }
        #expect(abs(clock.ppm - 5000) < 100, "measured \(clock.ppm) ppm")
        // The fitted line puts the latest frame within a millisecond of its real time.
        #expect(abs(clock.nanoseconds(atPosition: Double(n)) - Double(card.time(n))) < 1_000_000)
    }

    @Test func implausibleRatesFallBackToNominal() {
        var clock = AudioClockEstimator(nominalRate: 48000)
        // A device that returns 10 s of audio in 10 ms: stamps barely move.
        for k in 0..<1000 { _ = clock.add(position: UInt64(k * 480), timestampNanoseconds: 1_000_000_000 + UInt64(k) * 10_000, discontinuity: false) }
        #expect(clock.rate == 48000)
    }

    @Test func framesLostInAnOverrunMoveThePositionsOn() {
        let card = SimulatedCard(ppm: 0, jitter: 0)
        var clock = AudioClockEstimator(nominalRate: 48000)
        var reported: UInt64 = 0, real: UInt64 = 0
        for k in 0..<300 {
            if k == 200 { real += 4800 }   // 100 ms lost: the device's count does not include them
            let p = clock.add(position: reported, timestampNanoseconds: card.time(real), discontinuity: k == 200)
            #expect(p == real || abs(Int64(p) - Int64(real)) <= 1)
            reported += 480; real += 480
        }
        #expect(clock.framesLost >= 4799 && clock.framesLost <= 4801)
    }
}

@Suite struct TimelineAlignerTests {
    /// Runs 60 s of a simulated card through the aligner with video-like emit calls every 33 ms;
    /// returns the aligner and the track.
    func align(_ card: inout SimulatedCard, seconds: Double = 60, gapAt: UInt64? = nil, gapFrames: UInt64 = 9600) -> (AudioTimelineAligner, [Int16]) {
        let origin = card.start + 20_000_000   // the first video frame, 20 ms after the audio starts
        var a = AudioTimelineAligner(sampleRate: card.rate, channels: 1, origin: origin)
        var out: [Int16] = []
        var n: UInt64 = 0, reported: UInt64 = 0
        var block = [Int16](repeating: 0, count: 480)
        var nextVideo = origin
        while Double(card.time(n) - card.start) / 1e9 < seconds {
            var lost = false
            if let g = gapAt, n == g { n += gapFrames; lost = true }   // an overrun (200 ms by default)
            for i in 0..<480 { block[i] = card.sample(n + UInt64(i)) }
            let stamp = card.stamp(n)
            block.withUnsafeBytes { a.add($0, format: .s16, position: reported, timestampNanoseconds: stamp, discontinuity: lost) }
            n += 480; reported += 480
            while nextVideo + 33_000_000 < card.time(n) { a.emit(upTo: nextVideo, into: &out); nextVideo += 33_333_333 }
        }
        return (a, out)
    }

    /// Where each click starts in the track, as an error against where it belongs (ms).
    func clickErrors(_ out: [Int16], card: SimulatedCard, origin: UInt64) -> [Double] {
        var errors: [Double] = []
        var i = 1
        while i < out.count {
            if out[i] > 15000 && out[i - 1] < 15000 {
                // The track's sample i is at origin + i/R; the click belongs at a whole second after start.
                let sinceStart = (Double(origin - card.start) + Double(i) / Double(card.rate) * 1e9) / 1e9
                errors.append((sinceStart - sinceStart.rounded()) * 1000)
                i += Int(card.rate / 100)
            }
            i += 1
        }
        return errors
    }

    @Test func aFastCardStaysInSyncWhereCountingSamplesWouldDrift() {
        var card = SimulatedCard(ppm: 5000)
        let (a, out) = align(&card)
        let origin = card.start + 20_000_000
        let errors = clickErrors(out, card: card, origin: origin)
        #expect(errors.count >= 55)
        #expect(errors.allSatisfy { abs($0) < 2 }, "click errors (ms): \(errors.map { Int($0 * 10) })")
        // Worst case includes the first second, before the clock's rate is measured.
        #expect(a.maximumError < 0.004)
        #expect(abs(a.clock.ppm - 5000) < 200)
        // About 0.5 % of the frames were dropped to keep up; a writer that counted samples would
        // have put the last click 0.5 % × 59 s ≈ 300 ms late.
        let ratio = Double(a.dropped) / Double(a.emitted)
        #expect(ratio > 0.004 && ratio < 0.006, "dropped \(a.dropped) of \(a.emitted)")
        let naiveLast = 59 * (1 + 5000e-6) - 59
        #expect(naiveLast > 0.29)
    }

    @Test func aSlowCardGetsFramesRepeated() {
        var card = SimulatedCard(ppm: -2000)
        let (a, out) = align(&card)
        let errors = clickErrors(out, card: card, origin: card.start + 20_000_000)
        #expect(errors.count >= 55)
        #expect(errors.allSatisfy { abs($0) < 2 }, "click errors (ms): \(errors.map { Int($0 * 10) })")
        #expect(a.repeated > 0 && a.dropped == 0)
    }

    @Test func aNominalClockCopiesTheSamplesUnchanged() {
        var a = AudioTimelineAligner(sampleRate: 48000, channels: 2, origin: 1_000_000_000)
        var input: [Int16] = []
        for n in 0..<(48000 * 4) { input.append(Int16(truncatingIfNeeded: n)); input.append(Int16(truncatingIfNeeded: -n)) }
        var out: [Int16] = []
        for p in stride(from: 0, to: 48000 * 4, by: 480) {
            let t = 1_000_000_000 + UInt64(Double(p) * 1e9 / 48000)
            input[(2 * p)..<(2 * p + 960)].withUnsafeBytes { a.add($0, format: .s16, position: UInt64(p), timestampNanoseconds: t) }
            a.emit(upTo: t, into: &out)
        }
        #expect(out.count > 48000 * 2 * 3)
        #expect(Array(input.prefix(out.count)) == out)
        #expect(a.dropped == 0 && a.repeated == 0)
    }

    @Test func anOverrunBecomesSilenceAndWhatFollowsStaysInPlace() {
        var card = SimulatedCard(ppm: 0, jitter: 0)
        let (a, out) = align(&card, seconds: 10, gapAt: 48000 * 5 + 480 * 20)
        let errors = clickErrors(out, card: card, origin: card.start + 20_000_000)
        #expect(errors.count >= 8)
        #expect(errors.allSatisfy { abs($0) < 1 }, "\(errors)")
        #expect(a.silenceInserted >= 9600)
    }

    /// A long overrun (3 s: held as a run of silence, not zeros) on a card 0.5 % fast with jittery
    /// stamps: the drops that keep the sound in sync go on through the silence and after it, and
    /// every click after the hole is where it belongs.
    @Test func aLongOverrunOnADriftingCardKeepsTheClicksInPlace() {
        var card = SimulatedCard(ppm: 5000)
        let (a, out) = align(&card, seconds: 20, gapAt: 48000 * 8 + 480 * 20, gapFrames: 3 * 48000)
        let errors = clickErrors(out, card: card, origin: card.start + 20_000_000)
        #expect(errors.count >= 15, "\(errors.count) clicks")
        #expect(errors.allSatisfy { abs($0) < 2 }, "click errors (ms): \(errors.map { Int($0 * 10) })")
        #expect(a.silenceInserted >= 3 * 48000 - 480 && a.silenceInserted <= 3 * 48000 + 480, "\(a.silenceInserted)")
        #expect(a.dropped > 0)
    }

    /// Sound that starts after the movie's time zero but is already held while the video is still
    /// short of it (a replay, or a loaded machine: the sound ran ahead of the frames): the silence
    /// before it is emitted once, in pieces, and the samples land where they belong. (A movie of
    /// a dump replay had its sound 0.17–0.5 s late: every call emitted the whole silence again.)
    @Test func silenceBeforeALateStartIsEmittedOnceWhenTheVideoCatchesUpInSteps() {
        let origin: UInt64 = 1_000_000_000
        var a = AudioTimelineAligner(sampleRate: 48000, channels: 2, origin: origin)
        // The input starts 175 ms after time zero; 1 s of it is held before any video.
        var input: [Int16] = []
        for n in 0..<48000 { input.append(Int16(truncatingIfNeeded: n + 1)); input.append(0) }
        for p in stride(from: 0, to: 48000, by: 480) {
            let t = origin + 175_000_000 + UInt64(Double(p) * 1e9 / 48000)
            input[(2 * p)..<(2 * p + 960)].withUnsafeBytes { a.add($0, format: .s16, position: UInt64(p), timestampNanoseconds: t) }
        }
        var out: [Int16] = []
        for frame in 1...30 { a.emit(upTo: origin + UInt64(frame) * 33_333_333, into: &out) }
        #expect(a.emitted == UInt64(out.count / 2))
        #expect(a.silenceInserted == 8400)
        // The frames before 999 999 990 ns: 48000 (rounding down lost the last).
        #expect(out.count / 2 == 48000)
        let firstSound = (0..<(out.count / 2)).first { out[2 * $0] != 0 }
        #expect(firstSound == 8400)
        #expect(out[2 * 8400] == 1 && out[2 * 20000] == Int16(20000 - 8400 + 1))
    }

    /// A long overrun is held as a count of silent frames, not as zeros: memory stays that of the
    /// sound captured, and the track still has the silence where the sound was lost and every
    /// captured sample where it belongs. (At 768 kHz × 64 channels the 10 s a gap may fill was a
    /// gigabyte of zeros per overrun: a recording grew to gigabytes and never finished.)
    @Test func aLongOverrunIsHeldAsACountAndWrittenAsSilence() {
        let origin: UInt64 = 2_000_000_000, rate = 48000, channels = 8
        var a = AudioTimelineAligner(sampleRate: rate, channels: channels, origin: origin)
        // Channel 0 holds the real position (mod 2^15, never 0), the others its negative.
        func block(_ real: Int, _ frames: Int) -> [Int16] {
            var b: [Int16] = []
            for n in real..<(real + frames) {
                let v = Int16(n % 32000 + 1)
                b.append(v); for _ in 1..<channels { b.append(-v) }
            }
            return b
        }
        // 2 s, then 3 s lost (the card's count leaves them out), then 2 s: all of it queued
        // before the movie's thread gets to it.
        var reported = 0, real = 0
        for k in 0..<(7 * 100) {
            if k >= 200 && k < 500 { real += 480; continue }
            let lost = k == 500
            let t = origin + UInt64(Double(real) * 1e9 / Double(rate))
            block(real, 480).withUnsafeBytes { a.add($0, format: .s16, position: UInt64(reported), timestampNanoseconds: t, discontinuity: lost) }
            reported += 480; real += 480
        }
        // Only what was captured is held (4 s), not the 3 s of silence with it.
        #expect(a.bytesHeld == 4 * rate * channels * 2)
        #expect(a.inputEnd == UInt64(7 * rate))
        var out: [Int16] = []
        for frame in 1...210 { a.emit(upTo: origin + UInt64(frame) * 33_333_333, into: &out) }
        #expect(a.silenceInserted == UInt64(3 * rate))
        #expect(out.count / channels == 7 * rate)   // every frame before 6.99999993 s
        var wrong = 0
        for k in 0..<(out.count / channels) {
            let expected: Int16 = k >= 2 * rate && k < 5 * rate ? 0 : Int16(k % 32000 + 1)
            if out[k * channels] != expected || out[k * channels + channels - 1] != -expected { wrong += 1 }
        }
        #expect(wrong == 0)
        #expect(a.dropped == 0 && a.repeated == 0)
        #expect(a.bytesHeld <= 2 * channels * 2)
    }

    /// The largest format the README allows, 768 kHz × 64 channels, with a 10 s overrun.
    @Test func aLongOverrunAtTheLargestFormatHoldsOnlyWhatWasCaptured() {
        let origin: UInt64 = 1_000_000_000, rate = 768_000, channels = 64
        var a = AudioTimelineAligner(sampleRate: rate, channels: channels, origin: origin)
        let period = [Int16](repeating: 1000, count: 7680 * channels)   // 10 ms
        var reported = 0, real = 0
        for k in 0..<20 {
            let lost = k == 10
            if lost { real += 10 * rate }
            let t = origin + UInt64(Double(real) * 1e9 / Double(rate))
            period.withUnsafeBytes { a.add($0, format: .s16, position: UInt64(reported), timestampNanoseconds: t, discontinuity: lost) }
            reported += 7680; real += 7680
        }
        #expect(a.bytesHeld == 20 * 7680 * channels * 2)   // 19.7 MB, not 1 GB more of zeros
        #expect(a.inputEnd == UInt64(10 * rate + 20 * 7680))
        var out: [Int16] = []
        a.emit(upTo: origin + 150_000_000, into: &out)
        #expect(out.count == 115_200 * channels)
        #expect(out[0] == 1000 && out[(76_800 - 1) * channels] == 1000 && out[76_800 * channels] == 0 && out.last == 0)
    }
}
