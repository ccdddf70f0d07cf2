// The lock can fail, so the function must return a Result whose error takes fenced::Error.
#[fenced::locked(client = client, name = "x")]
async fn plain(client: &fenced::Client) -> u64 {
    1
}

fn main() {}
