// A second evaluation set of real photographs, from sources that no stage was ever tuned on:
// OpenCV's sample pictures (Debian's `opencv-doc`) and scikit-image's (the `scikit-image` wheel on
// PyPI). They are smaller (333–1110 px high) and of other kinds than the wallpapers of
// `fetchEvaluationPhotos()`: a street of brick houses, a potted aloe on a patterned cloth, cut
// fruit, a mandrill, an office block, a football player before a crowd, a soft orange, a squirrel,
// a butterfly on a leaf, a building against a blue sky, a potted plant, an astronaut, a cat's
// face (fur), a cup of coffee, a rocket on its pad at night, a motorcycle in a garage.
//
// `VF_PHOTO_SET=others` makes `--autofocus` and `--stabilise-motions` run on this set instead of
// the wallpapers. PNG files are converted once to binary PPM with ffmpeg (the sim camera reads
// JPEG and PPM). Nothing fetched is committed; it is cached under /tmp/viewfinder-photos.
import Foundation

func fetchOtherSourcePhotos() -> [EvalPhoto] {
    let dir = "/tmp/viewfinder-photos"
    let opencv = ["data/leuvenA.jpg", "data/aloeL.jpg", "data/fruits.jpg", "data/baboon.jpg", "data/building.jpg", "data/messi5.jpg",
                  "data/orange.jpg", "data/squirrel_cls.jpg", "data/butterfly.jpg", "data/home.jpg", "alphamat/input_images/plant.jpg"]
    var out = debianPhotos(package: "opencv-doc", under: "o/usr/share/doc/opencv-doc/examples", names: opencv) {
        URL(fileURLWithPath: $0).deletingPathExtension().lastPathComponent
    }
    let skimage = ["astronaut.png", "chelsea.png", "coffee.png", "rocket.jpg", "motorcycle_left.png"]
    let sk = "s/skimage/data"
    if !skimage.allSatisfy({ FileManager.default.fileExists(atPath: "\(dir)/\(sk)/\($0)") }) {
        // The wheel is a zip; only its data folder is taken (nothing is installed).
        let (c, o) = shell("mkdir -p \(dir)/s && cd \(dir)/s && python3 -m pip download --no-deps --only-binary=:all: scikit-image -d wheel -q 2>&1 && "
                           + "/usr/bin/python3 -c \"import zipfile,glob; z=zipfile.ZipFile(sorted(glob.glob('wheel/scikit_image-*.whl'))[-1]); [z.extract(n) for n in z.namelist() if n.startswith('skimage/data/')]\"")
        if c != 0 { print("  scikit-image not fetched (pip download failed: \(o.prefix(160)))") }
    }
    for n in skimage {
        var p = "\(dir)/\(sk)/\(n)"
        guard FileManager.default.fileExists(atPath: p) else { continue }
        if p.hasSuffix(".png") {
            let ppm = String(p.dropLast(4)) + ".ppm"
            if !FileManager.default.fileExists(atPath: ppm) {
                let (c, o) = shell("ffmpeg -loglevel error -y -i \(p) -pix_fmt rgb24 \(ppm)")
                if c != 0 { print("  \(n): not converted to PPM (\(o.prefix(120)))"); continue }
            }
            p = ppm
        }
        out.append(EvalPhoto(package: "scikit-image", path: p, name: URL(fileURLWithPath: n).deletingPathExtension().lastPathComponent))
    }
    return out
}

/// The photographs a report runs on: the wallpapers, or with `VF_PHOTO_SET=others` the second set.
func reportPhotos() -> [EvalPhoto] {
    ProcessInfo.processInfo.environment["VF_PHOTO_SET"] == "others" ? fetchOtherSourcePhotos() : fetchEvaluationPhotos()
}
