/// A small convex quadratic program with box bounds — minimise ½·xᵀHx + qᵀx subject to
/// lo ≤ x ≤ hi — where H is symmetric positive definite and banded (|i − j| > `band` ⇒ 0), solved
/// by projected Newton steps (Bertsekas 1982): each step fixes the variables held at a bound by
/// their gradient, takes the exact Newton step on the rest (a banded Cholesky: the free
/// variables' submatrix of a banded matrix is banded too), and projects it back into the box with
/// a backtracking line search. For a QP this ends, in practice in 2–6 steps, at the exact optimum;
/// `maxIterations` bounds the work per call and the iterate is always feasible.
struct BoxQP {
    let capacity: Int
    private(set) var h: [Double]
    private(set) var q: [Double]
    var lo: [Double]
    var hi: [Double]
    var x: [Double]
    private var g: [Double]
    private var d: [Double]
    private var xn: [Double]
    private var chol: [Double]
    private var free: [Int]
    private var rhs: [Double]

    init(capacity n: Int) {
        capacity = n
        h = [Double](repeating: 0, count: n * n)
        q = [Double](repeating: 0, count: n); lo = q; hi = q; x = q; g = q; d = q; xn = q; rhs = q
        chol = h
        free = [Int](repeating: 0, count: n)
    }

    /// Clears H and q for a problem of `n` variables.
    mutating func reset(_ n: Int) {
        for i in 0..<n { q[i] = 0; for j in 0..<n { h[i * capacity + j] = 0 } }
    }

    /// Adds w·(Σ coefficients[k]·x[first + k] + constant)² to the objective (coefficients outside
    /// 0..<n are folded into the constant by the caller).
    mutating func addSquare(weight w: Double, first: Int, _ c: [Double], from a0: Int, constant b: Double) {
        for a in a0..<c.count {
            let i = first + a - a0
            q[i] += 2 * w * b * c[a]
            for bb in a0..<c.count { h[i * capacity + first + bb - a0] += 2 * w * c[a] * c[bb] }
        }
    }

    mutating func addDiagonal(_ i: Int, weight w: Double, target r: Double) {
        h[i * capacity + i] += 2 * w
        q[i] -= 2 * w * r
    }

    func objective(_ v: [Double], _ n: Int) -> Double {
        var f = 0.0
        for i in 0..<n {
            var hv = 0.0
            let row = i * capacity
            for j in max(0, i - 3)..<min(n, i + 4) { hv += h[row + j] * v[j] }
            f += v[i] * (0.5 * hv + q[i])
        }
        return f
    }

    /// Solves the problem over the first `n` variables from the start point in `x` (clamped into
    /// the box). Returns the number of Newton steps taken. Bandwidth 3 (third differences).
    @discardableResult
    mutating func solve(_ n: Int, maxIterations: Int = 12, band: Int = 3) -> Int {
        for i in 0..<n { x[i] = min(max(x[i], lo[i]), hi[i]) }
        var f0 = objective(x, n)
        for it in 0..<maxIterations {
            for i in 0..<n {
                var s = q[i]
                let row = i * capacity
                for j in max(0, i - band)..<min(n, i + band + 1) { s += h[row + j] * x[j] }
                g[i] = s
            }
            // Free variables: not held at a bound by the gradient.
            var m = 0
            for i in 0..<n {
                let atLo = x[i] <= lo[i] + 1e-12 && g[i] > 0, atHi = x[i] >= hi[i] - 1e-12 && g[i] < 0
                if !(atLo || atHi) { free[m] = i; m += 1 }
                d[i] = 0
            }
            if m == 0 { return it }
            // Banded Cholesky of H restricted to the free set (indices ascending, so the band stays).
            for a in 0..<m {
                let ia = free[a]
                for b in max(0, a - band)...a {
                    let ib = free[b]
                    var s = ia - ib <= band ? h[ia * capacity + ib] : 0
                    for k in max(0, a - band)..<b { s -= chol[a * capacity + k] * chol[b * capacity + k] }
                    if a == b {
                        chol[a * capacity + a] = s > 1e-300 ? s.squareRoot() : 1e-150
                    } else {
                        chol[a * capacity + b] = s / chol[b * capacity + b]
                    }
                }
            }
            for a in 0..<m {
                var s = -g[free[a]]
                for k in max(0, a - band)..<a { s -= chol[a * capacity + k] * rhs[k] }
                rhs[a] = s / chol[a * capacity + a]
            }
            for a in stride(from: m - 1, through: 0, by: -1) {
                var s = rhs[a]
                for k in (a + 1)..<min(m, a + band + 1) { s -= chol[k * capacity + a] * rhs[k] }
                rhs[a] = s / chol[a * capacity + a]
                d[free[a]] = rhs[a]
            }
            // Projected line search (Armijo along the projection arc).
            var alpha = 1.0, accepted = false, f1 = f0, change = 0.0
            for _ in 0..<30 {
                var decrease = 0.0
                change = 0
                for i in 0..<n {
                    xn[i] = min(max(x[i] + alpha * d[i], lo[i]), hi[i])
                    decrease += g[i] * (xn[i] - x[i])
                    change = max(change, abs(xn[i] - x[i]))
                }
                f1 = objective(xn, n)
                if f1 <= f0 + 1e-4 * decrease + 1e-12 * abs(f0) { accepted = true; break }
                alpha *= 0.5
            }
            if !accepted { return it + 1 }
            swap(&x, &xn)
            f0 = f1
            if change < 1e-7 { return it + 1 }
        }
        return maxIterations
    }
}

/// Plans a smooth camera path over a sliding window with the crop window as a hard constraint:
/// an L2 cousin of the L1-optimal paths of Grundmann, Kwatra & Essa (CVPR 2011), solved per frame
/// (model-predictive): the path through the frames the look-ahead holds plus a predicted stretch
/// beyond them minimises
///
///     Σ (second difference)² + jerk·Σ (third difference)² + fidelity·Σ (path − camera)²
///
/// subject to |path − camera| ≤ margin on every frame. Steady pans cost nothing (their second
/// difference is zero), so the path follows intended motion without lag; the hard constraint
/// bends the path ahead of the crop edge instead of clamping it there; the small fidelity term
/// keeps the path near the middle of the window, so there is room left for the next shake. The
/// first three differences reach back into the path already shown (fixed), so consecutive plans
/// join without bumps, and no mode switches between "hold" and "follow". Beyond the frames it
/// knows, the camera is predicted by a straight line fitted to the last `trendFrames` frames.
///
/// How much the path follows is itself smooth in the camera's travel: an intent detector fits a
/// straight line to the last `intentFrames` frames and compares the distance it covers with the
/// margin. Shake, walking bounce and slow drift (the 0.3–1 Hz wander of a hand) cover little and
/// are held — a weak pull (time constant `holdTimeConstant`), no predicted slope, no terminal
/// pull — while a pan or tilt soon covers a good part of the margin and is followed with the
/// full pull, the predicted line and the terminal pull. The weights blend continuously
/// (intent = r⁴/(1 + r⁴), r the travel over `intentScale` × margin), so there is no switch.
///
/// One axis at a time; the work per frame is bounded (at most `maxIterations` banded Newton
/// steps on a window of look-ahead + `predictFrames` + 1 variables).
struct CameraPathPlanner {
    /// Weight of the data term relative to the second differences: a cutoff of about
    /// 1/`timeConstant` radians per frame (the path ignores motion faster than a period of
    /// 2π·timeConstant frames unless the crop forces it to follow).
    let fidelity: Double
    /// Weight of the third differences (smoother starts and stops of a pan).
    let jerk: Double
    /// Frames planned beyond the known ones, on the predicted camera path.
    let predictFrames: Int
    /// Frames the straight-line prediction is fitted to.
    let trendFrames: Int
    let maxIterations: Int
    /// Weight pulling the plan's last frame onto the predicted camera line (position and slope):
    /// the plan must be back on the camera's course by the end of its window, which damps it
    /// (no overshoot after a pan starts) however short the window.
    let terminal: Double
    private var qp: BoxQP
    private var plan: [Double]
    private var planLength = 0
    private let d1: [Double] = [-1, 1]
    private let d2: [Double] = [1, -2, 1]
    private let d3: [Double] = [-1, 3, -3, 1]
    /// Newton steps taken by the last call (diagnostics).
    private(set) var lastIterations = 0

    /// Weight of the data term while the camera is held (no intended motion): a time constant of
    /// `holdTimeConstant` frames.
    let holdFidelity: Double
    /// Frames (past and known) the intent detector fits its straight line to.
    let intentFrames: Int
    /// The camera's travel over `intentFrames`, as a fraction of the margin, at which the
    /// intent is ½.
    let intentScale: Double
    /// Intent of the last plan, 0 (hold) … 1 (follow) (diagnostics).
    private(set) var lastIntent = 0.0

    init(maxLookahead: Int, timeConstant: Double, holdTimeConstant: Double = 60, jerk: Double = 0, predictFrames: Int = 30, trendFrames: Int = 24, terminal: Double = 0.05, intentFrames: Int = 60, intentScale: Double = 1, maxIterations: Int = 12) {
        self.terminal = terminal
        let htc = max(holdTimeConstant, timeConstant, 0.5)
        holdFidelity = 1 / (htc * htc * htc * htc)
        self.intentFrames = max(3, intentFrames)
        self.intentScale = intentScale
        self.trendFrames = trendFrames
        let tc = max(timeConstant, 0.5)
        fidelity = 1 / (tc * tc * tc * tc)
        self.jerk = jerk
        self.predictFrames = predictFrames
        self.maxIterations = maxIterations
        qp = BoxQP(capacity: maxLookahead + 1 + predictFrames)
        plan = [Double](repeating: 0, count: maxLookahead + 1 + predictFrames)
    }

    /// The path shown on the last three frames (h1 the newest) and how many of them there are.
    private var h1 = 0.0, h2 = 0.0, h3 = 0.0
    private var historyCount = 0

    mutating func reset() { planLength = 0; historyCount = 0 }

    /// The value frame 0's path took in the end (the plan's, or less where the crop check cut
    /// it): the next plans join onto it.
    mutating func record(shown v: Double) {
        h3 = h2; h2 = h1; h1 = v
        historyCount = min(3, historyCount + 1)
    }

    /// The last plan at frame k (0 the frame just planned; k below the plan's length).
    func planned(_ k: Int) -> Double { plan[min(k, planLength - 1)] }

    /// Frames in the last plan.
    var plannedCount: Int { planLength }

    /// Shown path at frame k (k in -3 ... -1).
    private func shown(_ k: Int) -> Double { k == -1 ? h1 : (k == -2 ? h2 : h3) }

    /// The straight line fitted to `camera[from...to]` (least squares), as (value at `to`, slope).
    static func trend(_ camera: (Int) -> Double, from: Int, to: Int) -> (Double, Double) {
        let n = to - from + 1
        guard n >= 3 else { return (camera(to), 0) }
        var s0 = 0.0, s1 = 0.0, s2 = 0.0, y0 = 0.0, y1 = 0.0
        for k in from...to {
            let u = Double(k - to), v = camera(k)
            s0 += 1; s1 += u; s2 += u * u; y0 += v; y1 += u * v
        }
        let det = s0 * s2 - s1 * s1
        guard det > 1e-9 else { return (y0 / s0, 0) }
        return ((s2 * y0 - s1 * y1) / det, (s0 * y1 - s1 * y0) / det)
    }

    /// Plans frames `0..<known + predictFrames` of one axis and returns the path at frame 0.
    /// - Parameters:
    ///   - known: frames whose camera position is measured (frame 0 and its look-ahead), ≥ 1.
    ///   - camera: the camera position (the crop window's centre) of frame k, k < known; also read
    ///     for k in `-trendFrames..<0` (earlier frames) when `history` reaches back that far.
    ///   - margin: how far the path may stray from the camera at frame k (all k in the window).
    ///   - past: how many frames before frame 0 `camera` can read (for the prediction's fit).
    /// The path already shown (see `record(shown:)`) joins the plan through its differences.
    mutating func plan(known: Int, camera: (Int) -> Double, margin: (Int) -> Double, past: Int) -> Double {
        let n = known + predictFrames
        var (base, slope) = Self.trend(camera, from: known - 1 - min(trendFrames - 1, past + known - 1), to: known - 1)
        // Intent: how far the camera travelled over the last `intentFrames` (the straight line
        // fitted to them), against the room the crop leaves. Shake, walking bounce and slow
        // drift stay well inside the margin and are held (weak pull, no predicted slope); a pan
        // or tilt soon needs a good part of it and is followed (the pull of `timeConstant`, the
        // predicted line, the terminal pull). The blend is smooth in the travel — no switch.
        let intentFrom = known - 1 - min(intentFrames - 1, past + known - 1)
        let (_, intentSlope) = Self.trend(camera, from: intentFrom, to: known - 1)
        let travel = abs(intentSlope) * Double(known - 1 - intentFrom)
        let reference = max(1e-9, intentScale * max(0, margin(known - 1)))
        let r2 = (travel / reference) * (travel / reference)
        let intent = r2 * r2 / (1 + r2 * r2)
        lastIntent = intent
        slope *= intent
        let fidelity = intent * self.fidelity + (1 - intent) * holdFidelity
        let terminal = intent * self.terminal
        // Centre of the box for frame k (measured, then predicted).
        func centre(_ k: Int) -> Double { k < known ? camera(k) : base + slope * Double(k - known + 1) }
        qp.reset(n)
        // Differences reaching into the shown path: fixed values fold into the constant.
        func addRows(_ c: [Double], weight: Double) {
            let order = c.count
            for end in 0..<n {
                let first = end - order + 1
                if first < 0 && -first > historyCount { continue }
                var constant = 0.0
                for a in 0..<max(0, -first) { constant += c[a] * shown(first + a) }
                qp.addSquare(weight: weight, first: max(0, first), c, from: max(0, -first), constant: constant)
            }
        }
        addRows(d2, weight: 1)
        if jerk > 0 { addRows(d3, weight: jerk) }
        if terminal > 0 {
            qp.addDiagonal(n - 1, weight: terminal, target: centre(n - 1))
            if n >= 2 { qp.addSquare(weight: terminal, first: n - 2, d1, from: 0, constant: -slope) }
        }
        for k in 0..<n {
            let c = centre(k), m = max(0, margin(k))
            qp.addDiagonal(k, weight: fidelity, target: c)
            qp.lo[k] = c - m
            qp.hi[k] = c + m
        }
        // Warm start: the previous plan, one frame on.
        for k in 0..<n {
            if k + 1 < planLength { qp.x[k] = plan[k + 1] } else if planLength > 0 { qp.x[k] = plan[planLength - 1] } else { qp.x[k] = historyCount > 0 ? h1 : centre(k) }
        }
        lastIterations = qp.solve(n, maxIterations: maxIterations)
        for k in 0..<n { plan[k] = qp.x[k] }
        planLength = n
        return qp.x[0]
    }
}
