"""Stopwords: words that carry grammar, not topic.

The report's own limitation #2: without a stopword list, function-word n-grams
("什么", "怎么", "the") dominate the IDF mass and pull old topics back in.
Lists are plain frozensets so users can extend them (``params.extra_stopwords``).
"""

from __future__ import annotations

__all__ = ["ENGLISH_STOPWORDS", "CHINESE_STOP_CHARS", "CHINESE_STOPWORDS", "CHINESE_SPLIT_CHARS"]

ENGLISH_STOPWORDS: frozenset[str] = frozenset(
    """
    a about above after again against all also am an and any are aren't as at be because been before
    being below between both but by can can't cannot could couldn't did didn't do does doesn't doing don't
    down during each few for from further get gets got had hadn't has hasn't have haven't having he he'd
    he'll he's her here here's hers herself him himself his how how's i i'd i'll i'm i've if in into is
    isn't it it's its itself just let's like me more most mustn't my myself no nor not now of off on once
    only or other ought our ours ourselves out over own really same shan't she she'd she'll she's should
    shouldn't so some such than that that's the their theirs them themselves then there there's these
    they they'd they'll they're they've this those through to too under until up upon very was wasn't we
    we'd we'll we're we've were weren't what what's when when's where where's which while who who's whom
    why why's will with won't would wouldn't you you'd you'll you're you've your yours yourself
    yourselves yes yeah ok okay oh um uh hmm hey hi hello thanks thank please well lol haha wow much
    many one ones thing things something anything really quite just still even ever also maybe
    s t d ll m re ve don doesn didn isn wasn aren weren won wouldn shouldn couldn
    need needs needed make makes made making know knows knew known tell told want wants wanted use uses used
    get getting go goes going went gone take takes took give gives gave find found think thought say says said
    see saw seen look looks come comes came put let try tried seem seems able via per etc
    good bad best better great nice cool big small little lot lots kind sort way ways someone something
    anyone everyone anybody everybody somebody stuff interesting different another new old sure right
    topic topics question questions subject
    explain elaborate detail details detailed continue example examples correct incorrect
    again more why really actually exactly probably definitely basically anyway anyways okay alright
    happen happens happened happening compare compared comparing comparison previous previously
    difference differences differ versus vs roughly approximately around us
    """.split()
)
"""English function words, generic verbs and adjectives, contraction fragments and chat
fillers (lower case): words that say little about *which* topic a message is on."""

CHINESE_SPLIT_CHARS: frozenset[str] = frozenset("的了吗呢吧啊呀么嘛哦哈啦着过之其这那哪我你您他她它们")
"""Particles and pronouns, which almost never sit inside a content word: CJK runs are cut at them."""

CHINESE_STOP_CHARS: frozenset[str] = CHINESE_SPLIT_CHARS | frozenset(
    "是在有和与及或而也就都还又很太更最把被给让对从到向为以于上下个这那哪些我你您他她它们"
    "会能要想可不没一吧得地所如何什怎样里中请问呃嗯喔哎诶儿啥谁多少几再"
)
"""Single CJK characters too common to be a topic anchor on their own."""

CHINESE_STOPWORDS: frozenset[str] = frozenset(
    """
    什么 怎么 怎样 怎么样 为什么 如何 哪里 哪个 哪些 这个 那个 这些 那些 这样 那样 这里 那里 这么 那么
    我们 你们 他们 她们 它们 自己 一个 一些 一下 一点 可以 可能 应该 需要 是否 是不是 有没有 能不能 会不会
    就是 还是 但是 而且 或者 如果 因为 所以 然后 以及 并且 不过 只是 已经 现在 时候 之后 之前 非常 比较
    没有 不是 问题 请问 知道 觉得 认为 告诉 谢谢 你好 您好 好的 好吧 对的 是的 那么 多少 有什么 是什么
    话题 题外话 详细 具体 解释 展开 说说 讲讲 再说 一遍 再试 试试 确定 真的 正确 对吗 对不对 然后 继续
    为啥 咋办 怎么办 多说 举例 举个 例子 比如 什么意思 意思
    """.split()
)
"""Chinese function words; CJK bigrams equal to one of these are dropped."""
