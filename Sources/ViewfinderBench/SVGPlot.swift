import Foundation

/// A small SVG chart: linear axes with ticks, then lines, points, bars and marks drawn in data
/// coordinates. Output is a self-contained `<svg>` element (no scripts, no external resources).
struct SVGPlot {
    let width: Double
    let height: Double
    let title: String
    let xLabel: String
    let yLabel: String
    var xRange: ClosedRange<Double>
    var yRange: ClosedRange<Double>
    private var body = ""
    private let left = 62.0, right = 16.0, top = 30.0, bottom = 44.0

    /// The palette of series (colour-blind friendly).
    static let colours = ["#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#56b4e9", "#000000"]

    init(width: Double = 640, height: Double = 300, title: String, xLabel: String, yLabel: String, x: ClosedRange<Double>, y: ClosedRange<Double>) {
        self.width = width; self.height = height; self.title = title; self.xLabel = xLabel; self.yLabel = yLabel
        xRange = SVGPlot.padded(x); yRange = SVGPlot.padded(y)
    }

    /// A range with some room, never empty.
    static func padded(_ r: ClosedRange<Double>) -> ClosedRange<Double> {
        guard r.lowerBound.isFinite, r.upperBound.isFinite else { return 0...1 }
        if r.upperBound > r.lowerBound { return r }
        let d = max(abs(r.lowerBound) * 0.1, 1)
        return (r.lowerBound - d)...(r.upperBound + d)
    }

    func px(_ x: Double) -> Double { left + (x - xRange.lowerBound) / (xRange.upperBound - xRange.lowerBound) * (width - left - right) }
    func py(_ y: Double) -> Double { height - bottom - (y - yRange.lowerBound) / (yRange.upperBound - yRange.lowerBound) * (height - top - bottom) }

    /// Round tick values covering `r`, about `count` of them.
    static func ticks(_ r: ClosedRange<Double>, count: Int = 6) -> [Double] {
        let span = r.upperBound - r.lowerBound
        guard span > 0, span.isFinite else { return [r.lowerBound] }
        let raw = span / Double(count)
        let mag = pow(10, floor(log10(raw)))
        let step = [1.0, 2, 2.5, 5, 10].map { $0 * mag }.first { $0 >= raw } ?? raw
        var t = ceil(r.lowerBound / step) * step
        var out: [Double] = []
        while t <= r.upperBound + step * 1e-9 { out.append(abs(t) < step * 1e-9 ? 0 : t); t += step }
        return out
    }

    static func label(_ v: Double) -> String {
        if v == v.rounded() && abs(v) < 1e7 { return String(Int(v)) }
        if abs(v) >= 100 { return String(format: "%.0f", v) }
        if abs(v) >= 1 { return String(format: "%.2g", v).contains("e") ? String(format: "%.1f", v) : String(format: "%.3g", v) }
        return String(format: "%.3g", v)
    }

    static func escape(_ s: String) -> String {
        s.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;").replacingOccurrences(of: ">", with: "&gt;").replacingOccurrences(of: "\"", with: "&quot;")
    }

    static func f(_ v: Double) -> String { String(format: "%.1f", v) }

    mutating func line(_ xs: [Double], _ ys: [Double], colour: Int = 0, width w: Double = 1.5, dashed: Bool = false, name: String? = nil) {
        let pts = zip(xs, ys).filter { $0.0.isFinite && $0.1.isFinite }.map { "\(SVGPlot.f(px($0.0))),\(SVGPlot.f(py($0.1)))" }.joined(separator: " ")
        guard !pts.isEmpty else { return }
        body += "<polyline class=\"series\" fill=\"none\" stroke=\"\(SVGPlot.colours[colour % SVGPlot.colours.count])\" stroke-width=\"\(w)\"\(dashed ? " stroke-dasharray=\"5 3\"" : "") points=\"\(pts)\">"
        if let name { body += "<title>\(SVGPlot.escape(name))</title>" }
        body += "</polyline>\n"
    }

    mutating func points(_ xs: [Double], _ ys: [Double], colour: Int = 0, radius: Double = 2) {
        for (x, y) in zip(xs, ys) where x.isFinite && y.isFinite {
            body += "<circle class=\"series\" cx=\"\(SVGPlot.f(px(x)))\" cy=\"\(SVGPlot.f(py(y)))\" r=\"\(radius)\" fill=\"\(SVGPlot.colours[colour % SVGPlot.colours.count])\"/>"
        }
        body += "\n"
    }

    /// Bars from y = 0 (or the bottom of the range) between x0 and x1.
    mutating func bars(_ bins: [(x0: Double, x1: Double, y: Double)], colour: Int = 0) {
        let base = py(max(yRange.lowerBound, 0))
        for b in bins where b.y > 0 {
            let x = px(b.x0), w = max(1, px(b.x1) - px(b.x0) - 1), y = py(b.y)
            body += "<rect class=\"series\" x=\"\(SVGPlot.f(x))\" y=\"\(SVGPlot.f(y))\" width=\"\(SVGPlot.f(w))\" height=\"\(SVGPlot.f(max(0.5, base - y)))\" fill=\"\(SVGPlot.colours[colour % SVGPlot.colours.count])\"/>"
        }
        body += "\n"
    }

    mutating func verticalMark(_ x: Double, label: String, colour: Int = 6) {
        let X = SVGPlot.f(px(x))
        body += "<line x1=\"\(X)\" x2=\"\(X)\" y1=\"\(SVGPlot.f(top))\" y2=\"\(SVGPlot.f(height - bottom))\" stroke=\"\(SVGPlot.colours[colour % SVGPlot.colours.count])\" stroke-dasharray=\"4 3\"/>"
        body += "<text x=\"\(SVGPlot.f(px(x) + 3))\" y=\"\(SVGPlot.f(top + 12))\" font-size=\"11\">\(SVGPlot.escape(label))</text>\n"
    }

    mutating func horizontalMark(_ y: Double, label: String, colour: Int = 6) {
        let Y = SVGPlot.f(py(y))
        body += "<line x1=\"\(SVGPlot.f(left))\" x2=\"\(SVGPlot.f(width - right))\" y1=\"\(Y)\" y2=\"\(Y)\" stroke=\"\(SVGPlot.colours[colour % SVGPlot.colours.count])\" stroke-dasharray=\"4 3\"/>"
        body += "<text x=\"\(SVGPlot.f(width - right - 4))\" y=\"\(SVGPlot.f(py(y) - 3))\" font-size=\"11\" text-anchor=\"end\">\(SVGPlot.escape(label))</text>\n"
    }

    /// A legend in the top right corner.
    mutating func legend(_ names: [String]) {
        for (i, n) in names.enumerated() {
            let y = top + 16 + Double(i) * 14
            body += "<rect x=\"\(SVGPlot.f(width - right - 150))\" y=\"\(SVGPlot.f(y - 8))\" width=\"10\" height=\"10\" fill=\"\(SVGPlot.colours[i % SVGPlot.colours.count])\"/>"
            body += "<text x=\"\(SVGPlot.f(width - right - 136))\" y=\"\(SVGPlot.f(y + 1))\" font-size=\"11\">\(SVGPlot.escape(n))</text>\n"
        }
    }

    var svg: String {
        var s = "<svg class=\"plot\" xmlns=\"http://www.w3.org/2000/svg\" width=\"\(Int(width))\" height=\"\(Int(height))\" viewBox=\"0 0 \(Int(width)) \(Int(height))\" role=\"img\" aria-label=\"\(SVGPlot.escape(title))\">\n"
        s += "<rect x=\"0\" y=\"0\" width=\"\(Int(width))\" height=\"\(Int(height))\" fill=\"#ffffff\"/>\n"
        s += "<text x=\"\(SVGPlot.f(width / 2))\" y=\"18\" font-size=\"14\" font-weight=\"bold\" text-anchor=\"middle\">\(SVGPlot.escape(title))</text>\n"
        let x0 = SVGPlot.f(left), x1 = SVGPlot.f(width - right), y0 = SVGPlot.f(top), y1 = SVGPlot.f(height - bottom)
        for t in SVGPlot.ticks(yRange) where yRange.contains(t) {
            let Y = SVGPlot.f(py(t))
            s += "<line x1=\"\(x0)\" x2=\"\(x1)\" y1=\"\(Y)\" y2=\"\(Y)\" stroke=\"#e4e4e4\"/><text x=\"\(SVGPlot.f(left - 5))\" y=\"\(SVGPlot.f(py(t) + 4))\" font-size=\"11\" text-anchor=\"end\">\(SVGPlot.label(t))</text>\n"
        }
        for t in SVGPlot.ticks(xRange) where xRange.contains(t) {
            let X = SVGPlot.f(px(t))
            s += "<line x1=\"\(X)\" x2=\"\(X)\" y1=\"\(y1)\" y2=\"\(SVGPlot.f(height - bottom + 4))\" stroke=\"#444\"/><text x=\"\(X)\" y=\"\(SVGPlot.f(height - bottom + 17))\" font-size=\"11\" text-anchor=\"middle\">\(SVGPlot.label(t))</text>\n"
        }
        s += "<line x1=\"\(x0)\" x2=\"\(x0)\" y1=\"\(y0)\" y2=\"\(y1)\" stroke=\"#444\"/><line x1=\"\(x0)\" x2=\"\(x1)\" y1=\"\(y1)\" y2=\"\(y1)\" stroke=\"#444\"/>\n"
        s += body
        s += "<text x=\"\(SVGPlot.f((left + width - right) / 2))\" y=\"\(SVGPlot.f(height - 8))\" font-size=\"12\" text-anchor=\"middle\">\(SVGPlot.escape(xLabel))</text>\n"
        s += "<text x=\"14\" y=\"\(SVGPlot.f((top + height - bottom) / 2))\" font-size=\"12\" text-anchor=\"middle\" transform=\"rotate(-90 14 \(SVGPlot.f((top + height - bottom) / 2)))\">\(SVGPlot.escape(yLabel))</text>\n"
        s += "</svg>\n"
        return s
    }
}
